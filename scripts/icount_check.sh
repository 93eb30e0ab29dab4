#!/usr/bin/env bash
# Instructions per packet against the committed baseline (README "Instructions per
# packet"): builds quicknat-bench with the release profile CI builds, counts each mode's
# fast-path instructions per packet under callgrind, prints baseline, now and ratio, and
# fails when a figure grew more than 5%. A figure that shrank more than 5% passes with a
# note to update the baseline; a baseline recorded with another rustc skips the check
# (instruction counts depend on codegen). About 10 s after the build.
#
#   scripts/icount_check.sh            check
#   scripts/icount_check.sh --update   write the figures measured now to the baseline
#
# The last line is in cargo's format, so scripts/test.sh counts the check in its tally.
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=crates/bench/icount-baseline.json
update=()
case "${1:-}" in
    --update) update=(--update) ;;
    "") ;;
    *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac
if ! command -v valgrind >/dev/null 2>&1; then
    echo "icount: valgrind is not installed (apt-get install valgrind)"
    echo "test result: FAILED. 0 passed; 1 failed"
    exit 1
fi
cargo build --release --quiet -p bench --bin quicknat-bench
set +e
"${CARGO_TARGET_DIR:-target}/release/quicknat-bench" --icount --baseline "$baseline" "${update[@]}"
rc=$?
set -e
if [ "$rc" = 0 ]; then
    echo "test result: ok. 1 passed; 0 failed"
else
    echo "test result: FAILED. 0 passed; 1 failed"
fi
exit "$rc"
