#!/usr/bin/env bash
# logsvc (issue 12): writes the man page and shell completions generated from the clap CLI
# (quicknat man, quicknat completions SHELL) into packaging/generated/, where the Debian
# package (scripts/deb.sh) takes them from. They are generated, not committed: a new verb
# appears in them at the next build.
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
"$bin" completions bash > "$out/completions/quicknat.bash"
"$bin" completions zsh > "$out/completions/_quicknat"
"$bin" completions fish > "$out/completions/quicknat.fish"
echo "wrote $out/quicknat.1 and $out/completions/{quicknat.bash,_quicknat,quicknat.fish}"
