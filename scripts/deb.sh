#!/usr/bin/env bash
# Builds the Debian package of quicknat with cargo-deb (target/debian/quicknat_*.deb): the
# binary, the systemd unit, a default /etc/quicknat/quicknat.toml (a conffile), the man
# pages quicknat(1) and quicknat.toml(5) and shell completions (scripts/gen_docs.sh), the
# book as HTML (mdbook), the example configurations, README, CHANGELOG and licenses. See
# [package.metadata.deb] in crates/quicknat/Cargo.toml. Not part of scripts/test.sh.
#
# Needs clang: AF_XDP and the XDP and tc fast paths are compiled only when clang is
# there (crates/io/build.rs), and a package without them is refused unless
# QUICKNAT_ALLOW_NO_AF_XDP=1 is set. Needs mdbook for the book. Installs cargo-deb if
# missing (cargo install; takes minutes).
#   scripts/deb.sh [CARGO_DEB_ARGS...]     then: dpkg-deb -c target/debian/quicknat_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
MDBOOK_VERSION=0.5.4

# clang, as crates/io/build.rs looks for it ($CLANG, else clang on PATH).
clang="${CLANG:-clang}"
if ! "$clang" --version >/dev/null 2>&1; then
    if [ "${QUICKNAT_ALLOW_NO_AF_XDP:-}" = 1 ]; then
        echo "warning: $clang not found; QUICKNAT_ALLOW_NO_AF_XDP=1: building a package WITHOUT AF_XDP and the XDP/tc fast paths" >&2
        allow_no_xdp=1
    else
        echo "error: $clang not found: without it the package's quicknat has no AF_XDP backend and no XDP/tc fast path." >&2
        echo "       Install clang (apt-get install clang) and run again, or set QUICKNAT_ALLOW_NO_AF_XDP=1 to build without them." >&2
        exit 1
    fi
else
    allow_no_xdp=0
fi

if ! command -v mdbook >/dev/null; then
    echo "error: mdbook not found: the package ships the book (docs/) as HTML. Install it with" >&2
    echo "       cargo install mdbook --version $MDBOOK_VERSION --locked --no-default-features --features search" >&2
    exit 1
fi
have=$(mdbook --version | awk '{print $2}')
[ "$have" = "v$MDBOOK_VERSION" ] || [ "$have" = "$MDBOOK_VERSION" ] ||
    echo "warning: mdbook $have, the book is written for $MDBOOK_VERSION" >&2

command -v cargo-deb >/dev/null || cargo install --locked cargo-deb

# The commit for `quicknat --version`, also when built from an exported tree (read by
# crates/quicknat/build.rs, so before the build).
QUICKNAT_GIT_COMMIT="${QUICKNAT_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}"
export QUICKNAT_GIT_COMMIT
cargo build --release --quiet -p quicknat
bin="$target/release/quicknat"
# The binary says what it carries; a build that kept empty BPF objects must not ship.
"$bin" --version
if [ "$allow_no_xdp" = 0 ] && ! "$bin" --version | grep -q '^backends: .*af_xdp (XDP program built with clang)'; then
    echo "error: $clang is installed but $bin was built without the XDP program (a stale build?)." >&2
    echo "       cargo clean --release -p io, then run again." >&2
    exit 1
fi

scripts/gen_docs.sh "$bin"

# The book, from scratch so that a page removed from docs/src leaves no stale HTML.
rm -rf docs/book
mdbook build docs
rm -f docs/book/.nojekyll docs/book/.gitignore

cargo deb -p quicknat --no-build "$@"
deb=$(ls -t "$target"/debian/quicknat_*.deb | head -1)
echo "built $deb"
dpkg-deb -c "$deb"
