#!/usr/bin/env bash
# quicknat's test command (README.md): installs what the tests need on a fresh machine,
# then checks formatting, lints, the golden captures, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# scapy: the independent oracle that builds the golden captures and verifies checksums;
# pytest runs the live end-to-end tests (tests/e2e).
if ! python3 -c "import scapy" 2>/dev/null || ! python3 -c "import pytest" 2>/dev/null; then
    echo "==> installing scapy and pytest (scripts/requirements.txt)"
    python3 -m pip install --quiet -r scripts/requirements.txt
fi
# prometheus_client's OpenMetrics parser reads the exposition back in the runtime's unit
# tests (crates/runtime/src/metrics/tests.rs).
if ! python3 -c "import prometheus_client" 2>/dev/null; then
    echo "==> installing prometheus_client (scripts/requirements.txt)"
    python3 -m pip install --quiet -r scripts/requirements.txt
fi

# Real peers for the live end-to-end tests:
#   ping, iperf3, curl, ss (iproute2), ethtool (offloads), nft (nftables);
#   clang compiles the XDP and tc programs (crates/io/bpf);
#   tayga: the NAT64 the SIIT translation is compared with (test_tayga_diff.py);
#   tcpdump captures the ILA network (test_ila.py);
#   turnserver (coturn): the STUN server that classifies the NAT44 (RFC 5780, test_rfc5780.py);
#   prometheus scrapes /metrics (test_metrics.py);
#   editcap, dumpcap (wireshark-common) and tshark write and read pcapng (test_captures.py)
#   and decode IPFIX (test_natlog.py); nfacctd (pmacct) collects it;
#   systemd-analyze verifies the unit file (test_service.py);
#   valgrind's callgrind counts instructions per packet (scripts/icount_check.sh);
#   bird, birdc (bird2): a real BIRD on both ends of the routing tests (test_routing.py);
#   unbound and dig (bind9-dnsutils): the DNS64 resolver of the getting-started page and its
#   query (test_book_getting_started.py);
#   usrsctp's example client and daytime server (libusrsctp-examples): a userland SCTP on
#   both ends of the SCTP tests, these kernels having no SCTP module (test_sctp.py).
need=()
for tool in ping:iputils-ping iperf3:iperf3 ethtool:ethtool nft:nftables clang:clang tayga:tayga \
    tcpdump:tcpdump turnserver:coturn curl:curl ss:iproute2 prometheus:prometheus \
    editcap:wireshark-common dumpcap:wireshark-common tshark:tshark systemd-analyze:systemd \
    nfacctd:pmacct valgrind:valgrind bird:bird2 birdc:bird2 unbound:unbound dig:bind9-dnsutils; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
[ -x /usr/lib/usrsctp/client ] || need+=(libusrsctp-examples)
if [ "${#need[@]}" -gt 0 ] && [ "$(id -u)" = 0 ]; then
    echo "==> installing ${need[*]}"
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# mdBook builds the book under docs/ (the pinned version, from crates.io, if missing).
MDBOOK_VERSION=0.5.4
if ! mdbook --version 2>/dev/null | grep -q "v$MDBOOK_VERSION"; then
    echo "==> installing mdbook $MDBOOK_VERSION (cargo install)"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --quiet \
        --no-default-features --features search
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "==> golden captures match their generator"
python3 scripts/gen_golden.py --check
echo "==> live end to end with pytest (tests/e2e): NAT44, NAT64 and 464XLAT, ILA on both backends; translate replays the live gateways; SIIT compared with TAYGA"
cargo build --release --quiet -p quicknat -p lab
echo "==> documentation: the book builds, its links and examples hold, no history in the sources"
PATH="$HOME/.cargo/bin:$PATH" mdbook build docs --dest-dir "${CARGO_TARGET_DIR:-target}/book" >/dev/null
python3 scripts/check_docs.py --quicknat "${CARGO_TARGET_DIR:-target}/release/quicknat"
# One pytest run. The network-namespace suites need root and skip without it (CI runs as
# root); the differential test against TAYGA counts in the total, and a run of it that
# could not compare anything (no root, no TUN, no tayga, a crash) fails, never skips.
# A failed test must not end this script (set -e): the junit XML's counts go into the
# closing tally below.
if [ "$(id -u)" != 0 ]; then
    echo "not root: the network-namespace suites skip; the TAYGA differential test fails"
fi
e2e_xml=/tmp/quicknat-e2e.xml
rm -f "$e2e_xml"
set +e
PATH="$PATH:/usr/sbin:/sbin" python3 -m pytest tests/e2e -p no:cacheprovider -v -rfE \
    --junitxml="$e2e_xml" --quicknat "${CARGO_TARGET_DIR:-target}/release/quicknat"
e2e_rc=$?
set -e
# The e2e counts from the junit XML: a test case with a failure or an error failed, one
# with neither (nor a skip) passed; skipped ones count neither way. No XML counts as one
# failure, and so does a run that exited non-zero (interrupted, internal or usage error,
# nothing collected) without a failure in its XML.
e2e_counts=$(python3 - "$e2e_xml" "$e2e_rc" <<'PY'
import sys
import xml.etree.ElementTree as ET

path, rc = sys.argv[1], int(sys.argv[2])
try:
    cases = list(ET.parse(path).getroot().iter("testcase"))
except (OSError, ET.ParseError):
    print(0, 1)
    sys.exit()
failed = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
skipped = sum(1 for c in cases if c.find("skipped") is not None and c.find("failure") is None and c.find("error") is None)
passed = len(cases) - failed - skipped
print(passed, failed + (1 if rc != 0 and failed == 0 else 0))
PY
) || e2e_counts="0 1"
read -r e2e_passed e2e_failed <<< "$e2e_counts"
echo "pytest tests/e2e: exit $e2e_rc; $e2e_passed passed, $e2e_failed failed (from $e2e_xml)"

# Fuzzing: every libFuzzer target for a bounded time (docs/src/design/testing.md).
# QUICKNAT_FUZZ_SECONDS per target (default 10: 11 targets, about 2 min, plus building
# the instrumented targets). A crash or failed check fails the run and prints the input's
# path; each target clean counts as one passed test in the closing line.
echo "==> fuzzing: each target for ${QUICKNAT_FUZZ_SECONDS:-10} s (scripts/fuzz.sh)"
fuzz_log=$(mktemp)
set +e
scripts/fuzz.sh "${QUICKNAT_FUZZ_SECONDS:-10}" 2>&1 | tee "$fuzz_log"
fuzz_rc=${PIPESTATUS[0]}
set -e
fuzz_targets=$(ls fuzz/targets/src/bin/*.rs | wc -l)
fuzz_failed=$(grep -c '^FAILED: ' "$fuzz_log" || true)
if [ "$fuzz_rc" != 0 ] && [ "$fuzz_failed" = 0 ]; then fuzz_failed=1; fi
fuzz_passed=$((fuzz_targets - fuzz_failed))
[ "$fuzz_passed" -ge 0 ] || fuzz_passed=0
rm -f "$fuzz_log"
echo "fuzzing: $fuzz_passed targets clean, $fuzz_failed failed"

echo "==> cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"

# Model-checked tests of conntrack's lock-free protocols (loom, exhaustive, < 1 s): insert
# races, insert vs reap, reference counting, QSBR online/offline vs the reaper. `--cfg
# loom` swaps the tables' atomics for loom's, so it builds in a target directory of its
# own and leaves the main build cache alone. Their result lines join the tally below.
echo "==> loom models (conntrack)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    cargo test -p conntrack --release --lib loom_ 2>&1 | tee -a "$log"
# Instructions per packet: each mode's fast path under callgrind against the committed
# baseline (docs/src/performance/methods.md); a figure grown more than 5% fails, another
# rustc than the baseline's skips. Its last line ("test result: ...") joins the tally
# below as one test.
echo "==> instructions per packet (scripts/icount_check.sh)"
scripts/icount_check.sh 2>&1 | tee -a "$log" || true

# One closing line for the whole workspace (cargo prints one per test binary), the live
# end-to-end tests included (pytest's counts, read from its junit XML above), and the
# fuzz targets (one each).
awk -v ep="$e2e_passed" -v ef="$e2e_failed" -v fp="$fuzz_passed" -v ff="$fuzz_failed" \
    '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { p += ep + fp; f += ef + ff; printf "%d passed, %d failed\n", p, f; exit (f > 0) }' "$log"
