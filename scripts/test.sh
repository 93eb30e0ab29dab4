#!/usr/bin/env bash
# quicknat's test command (README.md): installs what the tests need on a fresh machine,
# then checks formatting, lints, the golden captures, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# scapy: the independent oracle that builds the golden captures and verifies checksums.
if ! python3 -c "import scapy" 2>/dev/null; then
    echo "==> installing scapy (scripts/requirements.txt)"
    python3 -m pip install --quiet -r scripts/requirements.txt
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "==> golden captures match their generator"
python3 scripts/gen_golden.py --check
echo "==> cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for the whole workspace (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
