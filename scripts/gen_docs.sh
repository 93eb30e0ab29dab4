#!/usr/bin/env bash
# Writes the man pages and shell completions generated from the binary into
# packaging/generated/, where the Debian package (scripts/deb.sh) takes them from:
#   quicknat.1                the command (quicknat man), every verb and its options
#   quicknat.toml.5           the configuration file (quicknat man --section 5), every key
#   completions/              bash, zsh and fish (quicknat completions SHELL)
# They are generated, not committed: a new verb or key appears in them at the next build.
#   scripts/gen_docs.sh [QUICKNAT_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
    cargo build --release --quiet -p quicknat
    bin="${CARGO_TARGET_DIR:-target}/release/quicknat"
fi
out=packaging/generated
mkdir -p "$out/completions"
"$bin" man > "$out/quicknat.1"
"$bin" man --section 5 > "$out/quicknat.toml.5"
"$bin" completions bash > "$out/completions/quicknat.bash"
"$bin" completions zsh > "$out/completions/_quicknat"
"$bin" completions fish > "$out/completions/quicknat.fish"
echo "wrote $out/quicknat.1, $out/quicknat.toml.5 and $out/completions/{quicknat.bash,_quicknat,quicknat.fish}"
