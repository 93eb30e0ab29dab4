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

# Real peers for the live end-to-end test: ping, iperf3, ethtool (offloads), nftables;
# clang compiles the XDP program of the AF_XDP backend (crates/io/bpf); tayga is the NAT64
# the SIIT translation is compared with (tests/e2e/test_tayga_diff.py); tcpdump captures the ILA
# network in tests/e2e/test_ila.py.
need=()
for tool in ping:iputils-ping iperf3:iperf3 ethtool:ethtool nft:nftables clang:clang tayga:tayga tcpdump:tcpdump; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
if [ "${#need[@]}" -gt 0 ] && [ "$(id -u)" = 0 ]; then
    echo "==> installing ${need[*]}"
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "==> golden captures match their generator"
python3 scripts/gen_golden.py --check
echo "==> live gateway end to end (network namespaces, real kernels on both sides)"
cargo build --release --quiet -p quicknat
e2e_line=""
if [ "$(id -u)" = 0 ]; then
    : > /tmp/quicknat-e2e.out
    # NAT44 (test_nat44.py), NAT64 and the 464XLAT chain (test_nat64.py), on both backends.
    # A failed check must not end this script (set -e, pipefail): the checks count in the
    # total. A run that ends without a summary line with failures counts as one failure.
    for backend in af_packet af_xdp; do
        for script in test_nat44.py test_nat64.py; do
            set +e
            python3 "tests/e2e/$script" --backend "$backend" --quicknat target/release/quicknat \
                2>>/tmp/quicknat-e2e.log | tee /tmp/quicknat-e2e.one
            rc=${PIPESTATUS[0]}
            set -e
            cat /tmp/quicknat-e2e.one >> /tmp/quicknat-e2e.out
            if [ "$rc" != 0 ] && ! grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$' /tmp/quicknat-e2e.one; then
                echo "0 passed, 1 failed" >> /tmp/quicknat-e2e.out
            fi
        done
    done
    # ILA: two routers and a moving host. A run that ends without a failing summary
    # line but with a non-zero status (a crash) counts as one failure.
    echo "==> ILA end to end (routers R1/R2/R3, SIR hosts, a host that moves)"
    for backend in af_packet af_xdp; do
        set +e
        python3 tests/e2e/test_ila.py --backend "$backend" --quicknat target/release/quicknat \
            2>>/tmp/quicknat-e2e.log | tee /tmp/quicknat-e2e-ila.out
        ila_rc=${PIPESTATUS[0]}
        set -e
        cat /tmp/quicknat-e2e-ila.out >> /tmp/quicknat-e2e.out
        if [ "$ila_rc" != 0 ] && ! grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$' /tmp/quicknat-e2e-ila.out; then
            echo "0 passed, 1 failed" | tee -a /tmp/quicknat-e2e.out
        fi
    done
    e2e_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' /tmp/quicknat-e2e.out || true)
else
    echo "skipped: needs root"
fi

# Differential SIIT test against TAYGA: it counts in the total, and a run that could not
# compare anything (no root, no TUN, no tayga, a crash) counts as a failure, never a skip.
echo "==> SIIT translation compared with TAYGA (RFC 7915)"
set +e
PATH="$PATH:/usr/sbin:/sbin" python3 tests/e2e/test_tayga_diff.py --quicknat target/release/quicknat \
    | tee /tmp/quicknat-tayga.out
tayga_rc=${PIPESTATUS[0]}
set -e
tayga_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' /tmp/quicknat-tayga.out || true)
if [ "$tayga_rc" != 0 ] && ! grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$' /tmp/quicknat-tayga.out; then
    tayga_line="${tayga_line}${tayga_line:+$'\n'}0 passed, 1 failed"
fi
e2e_line="${e2e_line}${e2e_line:+$'\n'}${tayga_line}"

echo "==> cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for the whole workspace (cargo prints one per test binary).
# The live end-to-end checks count too (their script prints "N passed, M failed").
echo "$e2e_line" >> "$log"
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
     END { printf "%d passed, %d failed\n", p, f; exit (f > 0) }' "$log"
