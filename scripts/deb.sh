#!/usr/bin/env bash
# logsvc (issue 12): builds the Debian package of quicknat with cargo-deb
# (target/debian/quicknat_VERSION_ARCH.deb): the binary, the systemd unit, the man page and
# shell completions (scripts/gen_docs.sh), the example configurations and a default
# /etc/quicknat/quicknat.toml (a conffile). Not part of scripts/test.sh: cargo-deb takes
# minutes to install. Build with clang installed, or the package has no AF_XDP.
#   scripts/deb.sh            then: dpkg-deb -c target/debian/quicknat_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang >/dev/null || echo "warning: clang missing: the package's quicknat will have no AF_XDP" >&2
command -v cargo-deb >/dev/null || cargo install --locked cargo-deb
cargo build --release --quiet -p quicknat
scripts/gen_docs.sh "${CARGO_TARGET_DIR:-target}/release/quicknat"
# The commit for `quicknat --version`, also when built from an exported tree.
export QUICKNAT_GIT_COMMIT="${QUICKNAT_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}"
cargo deb -p quicknat --no-build "$@"
deb=$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/quicknat_*.deb | head -1)
echo "built $deb"
dpkg-deb -c "$deb"
