"""The book's "A first gateway in namespaces" page, run as a reader runs it.

docs/src/getting-started/first-gateway.md is a sequence of ```sh blocks meant to be pasted
into a root shell in order. This test takes those blocks from the page, in document order,
and runs each in `bash -e -o pipefail` with the quicknat under test first on the PATH; it
stops at the first block that fails or outlasts its time limit. Then it checks what the
page says the blocks show:

  * NAT44: the configuration is valid; ping from demo-cli reaches demo-srv (3 replies);
    the HTTP body arrives; the server saw the pool address 203.0.113.1; `quicknat
    sessions` lists the client's ICMP and TCP sessions on 203.0.113.1; `quicknat stats`
    counts forwarded packets;
  * NAT64 with DNS64: unbound's dns64 module answers the AAAA query for www.example.net
    with 2001:db8:64::c633:6402 (198.51.100.2 under the prefix); the IPv6-only client
    pings the server by name and fetches the HTTP body; the server saw 203.0.113.1; the
    session lists the IPv6 client, the pool address and the server in both forms;
  * the page's clean-up block leaves no namespace, file or control socket behind.

Whatever happens, the teardown stops the processes of the page (every process in its
namespaces) and deletes its namespaces and files.

Needs root, and the page's tools: unbound, dig (bind9-dnsutils), curl, nft, ss, python3.
    sudo python3 -m pytest tests/e2e/test_book_getting_started.py [--quicknat PATH]
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "src" / "getting-started" / "first-gateway.md"

# What the page creates (its "Clean up" section removes the same).
NAMESPACES = ("demo-cli", "demo-gw", "demo-srv")
DEMO = Path("/tmp/qn-demo")
FILES = (Path("/etc/netns/demo-cli"), Path("/etc/unbound/quicknat-demo.conf"),
         Path("/etc/unbound/quicknat-demo.zone"))
SOCKET = Path("/run/quicknat-demo.sock")

BLOCK_TIMEOUT = 60  # seconds per block: the slowest (three pings, a curl) takes about 3 s

# tool: the Debian package that provides it
TOOLS = {"unbound": "unbound", "unbound-checkconf": "unbound", "dig": "bind9-dnsutils", "curl": "curl",
         "nft": "nftables", "ss": "iproute2", "ping": "iputils-ping"}

PREFIX_SERVER = "2001:db8:64::c633:6402"  # 198.51.100.2 under 2001:db8:64::/96


def sh_blocks(text):
    """The page's ```sh blocks, in document order."""
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```[ \t]*$", text, re.M | re.S)]


def namespaces_present():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    return [n for n in NAMESPACES if n in names]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop(pids, timeout=5.0):
    """SIGTERM to `pids` (so quicknat removes its nftables table and socket), SIGKILL to
    those still running after `timeout` seconds."""
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.time() + timeout
    while time.time() < end and any(alive(p) for p in pids):
        time.sleep(0.1)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cleanup():
    """Stops what the page started and removes what it made (also what a run that failed
    half-way, or an earlier interrupted run, left)."""
    # Every process the page started runs in one of its namespaces (`ip netns exec`): those
    # are stopped, and nothing else (a pid file can outlive its process).
    inside = set()
    for ns in namespaces_present():
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        inside.update(int(p) for p in out.split() if p.isdigit())
    stop(sorted(inside))
    for ns in namespaces_present():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    shutil.rmtree(DEMO, ignore_errors=True)
    for f in FILES:
        if f.is_dir():
            shutil.rmtree(f, ignore_errors=True)
        else:
            f.unlink(missing_ok=True)
    SOCKET.unlink(missing_ok=True)


class Run:
    """The page's blocks and what each printed (None: not reached)."""

    def __init__(self, blocks):
        self.blocks = blocks
        self.results = [None] * len(blocks)

    def index(self, needle):
        hits = [i for i, b in enumerate(self.blocks) if needle in b]
        assert len(hits) == 1, f"the page must have one ```sh block containing {needle!r}; found {len(hits)}"
        return hits[0]

    def output(self, needle):
        """The stdout of the block containing `needle`, which must have run and succeeded."""
        i = self.index(needle)
        r = self.results[i]
        assert r is not None, f"block {i + 1} ({needle!r}) was not reached: an earlier block failed"
        assert r["rc"] == 0, f"block {i + 1} failed:\n{self.describe(i)}"
        return r["out"]

    def describe(self, i):
        r = self.results[i]
        log = ""
        try:
            log = (DEMO / "quicknat.log").read_text()[-1500:]
        except OSError:
            pass
        return (f"--- block {i + 1}\n{self.blocks[i]}--- exit {r['rc']}\n--- stdout\n{r['out'][-2000:]}"
                f"\n--- stderr\n{r['err'][-2000:]}\n--- quicknat.log (tail)\n{log}")

    def log_tails(self):
        """For conftest's failure report."""
        try:
            return [("first-gateway", (DEMO / "quicknat.log").read_text()[-1500:])]
        except OSError:
            return []


@pytest.fixture(scope="module")
def page(quicknat):
    missing = sorted({pkg for tool, pkg in TOOLS.items()
                      if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")})
    if missing:
        pytest.skip(f"the page needs {', '.join(missing)} (apt-get install {' '.join(missing)}; "
                    "scripts/test.sh installs them)")
    if not os.path.exists(quicknat):
        pytest.fail(f"no quicknat binary at {quicknat}")
    blocks = sh_blocks(PAGE.read_text())
    assert blocks, f"no ```sh block in {PAGE}"
    run = Run(blocks)
    # `quicknat` on the PATH is the binary under test, as the page asks of the reader.
    bindir = tempfile.mkdtemp(prefix="qn-book-bin-")
    os.symlink(quicknat, os.path.join(bindir, "quicknat"))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}:/usr/sbin:/sbin", LC_ALL="C")
    cleanup()  # what an interrupted earlier run left
    try:
        for i, block in enumerate(blocks):
            try:
                p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=BLOCK_TIMEOUT, env=env, cwd="/")
                run.results[i] = {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
            except subprocess.TimeoutExpired as e:
                out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
                run.results[i] = {"rc": f"timeout after {BLOCK_TIMEOUT} s", "out": out, "err": err}
            if run.results[i]["rc"] != 0:
                break
        yield run
    finally:
        cleanup()
        shutil.rmtree(bindir, ignore_errors=True)


def test_every_block_of_the_page_runs(page):
    failed = [i for i, r in enumerate(page.results) if r is not None and r["rc"] != 0]
    assert not failed, page.describe(failed[0])
    assert all(r is not None for r in page.results)


# ------------------------------------------------------------------------------- NAT44


def test_nat44_configuration_is_valid(page):
    out = page.output("quicknat check-config --config /tmp/qn-demo/nat44.toml")
    assert "nat44.toml: valid" in out, out


def test_nat44_gateway_answers_on_its_control_socket(page):
    out = page.output("run --config /tmp/qn-demo/nat44.toml")
    assert re.search(r"^mode\s+nat44$", out, re.M) and "in0" in out and "out0" in out, out


def test_nat44_ping_and_http_cross_the_gateway(page):
    out = page.output("ping -c 3 198.51.100.2")
    assert "3 packets transmitted, 3 received" in out, out
    assert "hello from demo-srv" in out, out


def test_nat44_server_sees_the_pool_address_and_sessions_are_listed(page):
    out = page.output("cat /tmp/qn-demo/http.log")
    assert re.search(r"^203\.0\.113\.1 - - .*\"GET / HTTP/1\.1\" 200", out, re.M), out
    assert "10.0.0.2 -" not in out, out
    tcp = [l for l in out.splitlines() if l.startswith("tcp ")]
    assert any("10.0.0.2:" in l and "203.0.113.1:" in l and "198.51.100.2:8080" in l for l in tcp), out
    icmp = [l for l in out.splitlines() if l.startswith("icmp ")]
    assert any("10.0.0.2:" in l and "203.0.113.1:" in l for l in icmp), out
    fwd = re.search(r"^engine\.forwarded\s+(\d+)", out, re.M)
    assert fwd and int(fwd.group(1)) > 0, out


# ------------------------------------------------------------------------ NAT64, DNS64


def test_nat44_gateway_stops_cleanly(page):
    out = page.output("kill $(cat /tmp/qn-demo/quicknat.pid)\n")
    assert "stopped." in out, out


def test_nat64_gateway_starts(page):
    out = page.output("run --config /tmp/qn-demo/nat64.toml")
    assert "nat64.toml: valid" in out, out
    assert re.search(r"^mode\s+nat64$", out, re.M), out


def test_dns64_synthesizes_the_aaaa_record(page):
    out = page.output("dig +short")
    assert out.strip() == PREFIX_SERVER, out


def test_ipv6_only_client_reaches_the_ipv4_server_by_name(page):
    out = page.output("ping -c 3 www.example.net")
    assert PREFIX_SERVER in out and "3 packets transmitted, 3 received" in out, out
    assert "hello from demo-srv" in out, out


def test_nat64_server_sees_the_pool_address_and_the_session_is_listed(page):
    out = page.output("tail -n 1 /tmp/qn-demo/http.log")
    assert re.match(r"203\.0\.113\.1 - - ", out), out
    tcp = [l for l in out.splitlines() if l.startswith("tcp ")]
    assert any("[2001:db8:1::2]:" in l and "203.0.113.1:" in l and "198.51.100.2:8080" in l
               and f"[{PREFIX_SERVER}]:8080" in l for l in tcp), out


# ----------------------------------------------------------------------------- clean up


def test_clean_up_leaves_nothing(page):
    page.output("ip netns del demo-cli")
    assert namespaces_present() == [], namespaces_present()
    assert not DEMO.exists()
    assert not any(f.exists() for f in FILES), [str(f) for f in FILES if f.exists()]
    assert not SOCKET.exists()
