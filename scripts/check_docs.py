#!/usr/bin/env python3
"""Checks that the documentation cannot drift from the code.

- every page of docs/src is listed in SUMMARY.md and every page listed exists;
- every relative link in the book and README.md reaches a file, and its #anchor a heading;
- every ```toml block of the book and README.md, and every configuration file under
  examples/ and packaging/, is a file `quicknat check-config` accepts;
- no development history (issue/item/finding numbers) in the product's sources and docs
  (CHANGELOG.md and the dated reports under docs/src/reports/ are history by design).

    scripts/check_docs.py --quicknat target/release/quicknat
Exits non-zero with one line per problem.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
HISTORY = re.compile(r"\b(issue|item|finding)s? #?[0-9]+", re.IGNORECASE)


def mdbook_id(text):
    """The id mdBook gives a heading: its text lower-cased, spaces to '-', only
    alphanumerics, '-' and '_' kept."""
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def blocks_and_prose(text):
    """Yields (kind, lang, lines, first line number): kind 'code' for fenced blocks,
    'prose' for the lines between them."""
    lines = text.splitlines()
    i = 0
    prose = []
    start = 1
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            if prose:
                yield "prose", "", prose, start
            fence, lang = m.group(2), m.group(3)
            body = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                body.append(lines[j])
                j += 1
            yield "code", lang, body, i + 2
            prose = []
            i = j + 1
            start = i + 1
            continue
        prose.append(lines[i])
        i += 1
    if prose:
        yield "prose", "", prose, start


def anchors_of(path, cache={}):
    if path not in cache:
        ids = set()
        seen = {}
        for kind, _, lines, _ in blocks_and_prose(path.read_text()):
            if kind != "prose":
                continue
            for line in lines:
                m = HEADING.match(line)
                if m:
                    base = mdbook_id(m.group(2))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    ids.add(base if n == 0 else f"{base}-{n}")
                for a in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
                    ids.add(a)
        cache[path] = ids
    return cache[path]


def check_summary(problems):
    summary = BOOK / "SUMMARY.md"
    listed = set()
    for m in re.finditer(r"\]\(([^)]+\.md)\)", summary.read_text()):
        listed.add((BOOK / m.group(1)).resolve())
    for page in sorted(listed):
        if not page.exists():
            problems.append(f"docs/src/SUMMARY.md: {page.relative_to(ROOT)} does not exist")
    for page in sorted(BOOK.rglob("*.md")):
        if page.name != "SUMMARY.md" and page.resolve() not in listed:
            problems.append(f"{page.relative_to(ROOT)}: not in docs/src/SUMMARY.md")


def check_links(page, problems):
    for kind, _, lines, start in blocks_and_prose(page.read_text()):
        if kind != "prose":
            continue
        for n, line in enumerate(lines, start):
            line = re.sub(r"`[^`]*`", "", line)
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, mailto:, ...
                where = f"{page.relative_to(ROOT)}:{n}"
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page.resolve()
                if not dest.exists():
                    problems.append(f"{where}: link to {target}: no such file")
                    continue
                if anchor and dest.suffix == ".md" and anchor not in anchors_of(dest):
                    problems.append(f"{where}: link to {target}: no such heading")


def check_config(quicknat, text, where, problems):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        name = f.name
    try:
        r = subprocess.run(
            [quicknat, "check-config", "--config", name], capture_output=True, text=True, timeout=60
        )
    finally:
        os.unlink(name)
    if r.returncode != 0:
        why = (r.stderr.strip() or r.stdout.strip()).splitlines()
        problems.append(f"{where}: quicknat check-config refused it: {why[-1] if why else r.returncode}")


def check_toml_blocks(quicknat, page, problems):
    count = 0
    for kind, lang, lines, start in blocks_and_prose(page.read_text()):
        if kind == "code" and lang == "toml":
            check_config(quicknat, "\n".join(lines) + "\n", f"{page.relative_to(ROOT)}:{start}", problems)
            count += 1
    return count


def check_history(problems):
    roots = ["crates", "examples", "packaging", "scripts", "docs", "fuzz", "tests", ".ci", "README.md", "Cargo.toml"]
    skip_dirs = {"reports", "target", "book", "corpus", "artifacts", "golden"}
    me = Path(__file__).resolve()
    for r in roots:
        base = ROOT / r
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for f in sorted(files):
            if f.resolve() == me or skip_dirs & set(f.relative_to(ROOT).parts):
                continue
            if f.suffix in {".pcap", ".pcapng", ".svg", ".png", ".o"}:
                continue
            try:
                text = f.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                m = HISTORY.search(line)
                if m:
                    problems.append(f"{f.relative_to(ROOT)}:{n}: development history ({m.group(0)!r}): it belongs in CHANGELOG.md or git")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quicknat", default=str(ROOT / "target" / "release" / "quicknat"))
    ap.add_argument("--no-configs", action="store_true", help="skip the check-config runs")
    args = ap.parse_args()
    problems = []
    check_summary(problems)
    pages = sorted(BOOK.rglob("*.md")) + [ROOT / "README.md"]
    for page in pages:
        check_links(page, problems)
    blocks = 0
    files = 0
    if not args.no_configs:
        for page in pages:
            blocks += check_toml_blocks(args.quicknat, page, problems)
        for f in sorted(list((ROOT / "examples").rglob("*.toml")) + list((ROOT / "packaging").glob("*.toml"))):
            check_config(args.quicknat, f.read_text(), str(f.relative_to(ROOT)), problems)
            files += 1
    check_history(problems)
    for p in problems:
        print(p)
    print(f"docs: {len(pages)} pages, {blocks} toml blocks and {files} configuration files checked; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
