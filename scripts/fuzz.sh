#!/usr/bin/env bash
# Coverage-guided fuzzing on the stable toolchain: libFuzzer (the libfuzzer-sys crate
# builds it from source with the C++ compiler) driving binaries instrumented with
# SanitizerCoverage through stable `-C` flags — no nightly, no cargo-fuzz, no AFL++.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   each target for SECONDS (default 60)
#
# Targets run QUICKNAT_FUZZ_JOBS at a time (default 1). Each libFuzzer process is
# single-threaded, but on the project's 2-vCPU VMs two side by side each ran at half the
# executions per second of one alone (measured twice: wire 57k/s alone, 30k/s beside
# translate_nat44), so more jobs is fewer executions per target there: raise it only
# where the cores are really free. Results print in target order once all are done.
#
# Every target of fuzz/targets/src/bin (the checks are in fuzz/src, see README "Fuzzing")
# starts from its seed corpus fuzz/corpus/<target> and adds what it finds to a work
# corpus outside the repository ($QUICKNAT_FUZZ_WORK, default a temp dir; keep it between
# runs to keep going where the last run stopped). A crash, a failed check or a timeout
# fails the script and prints the input's path; replay it with
#   $CARGO_TARGET_DIR/fuzz/x86_64-unknown-linux-gnu/release/<target> <path>
# and keep it as a regression test by copying it into fuzz/corpus/<target>/ once fixed
# (cargo test -p quicknat-fuzz replays the corpus without the fuzzer).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
shift || true
all=$(cd fuzz/targets/src/bin && ls -- *.rs | sed 's/\.rs$//')
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || read -r -d '' -a targets <<< "$all" || true

triple=$(rustc -vV | sed -n 's/^host: //p')
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
# The flags cargo-fuzz passes for `--sanitizer none`, all stable: inline 8-bit edge
# counters and the PC table libFuzzer reads, and comparison tracing (how it learns magic
# values). `--cfg fuzzing` as cargo-fuzz sets it. With --target the flags reach the
# target's code only, not build scripts or proc macros.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cforce-frame-pointers=yes"
echo "==> building the fuzz targets (libFuzzer, SanitizerCoverage; $target_dir)"
start=$(date +%s)
(cd fuzz/targets && cargo build --release --quiet --target "$triple" --target-dir "$target_dir" --locked 2>/dev/null \
    || cargo build --release --quiet --target "$triple" --target-dir "$target_dir")
echo "built in $(( $(date +%s) - start )) s"
bin="$target_dir/$triple/release"

work="${QUICKNAT_FUZZ_WORK:-$(mktemp -d /tmp/quicknat-fuzz.XXXXXX)}"
mkdir -p "$work"
jobs="${QUICKNAT_FUZZ_JOBS:-1}"
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "no fuzz target $t (have: $(echo $all))"; exit 2; }
done

# One target: its libFuzzer run, its exit code in $work/$t/rc.
fuzz_one() {
    local t=$1
    mkdir -p "$work/$t/corpus" "$work/$t/crashes"
    rm -f "$work/$t/rc"
    # -timeout: one input taking more than 10 s is a finding (a hang); -rss_limit_mb: so
    # is using more than 2 GB. Crashes go to $work/$t/crashes/.
    set +e
    "$bin/$t" "$work/$t/corpus" "fuzz/corpus/$t" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -artifact_prefix="$work/$t/crashes/" -print_final_stats=1 >"$work/$t/log" 2>&1
    echo $? >"$work/$t/rc"
    set -e
}

running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait || true

failed=()
for t in "${targets[@]}"; do
    log="$work/$t/log"
    rc=$(cat "$work/$t/rc" 2>/dev/null || echo 1)
    stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" \
        | sed 's/^stat:://; s/: */=/' | tr '\n' ' ' || true)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 || true)
    printf '%-16s %3s s  %s %s\n' "$t" "$secs" "$stats" "${cov:+($cov)}"
    if [ "$rc" != 0 ]; then
        crash=$(ls -t "$work/$t/crashes/" 2>/dev/null | head -1)
        echo "FAILED: $t (exit $rc); input: $work/$t/crashes/$crash; log: $log"
        grep -m1 -A3 -E "panicked at|ERROR: libFuzzer" "$log" || true
        failed+=("$t")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing found ${#failed[@]} failing target(s): ${failed[*]} (work dir $work)"
    exit 1
fi
echo "fuzzing: ${#targets[@]} targets clean for $secs s each, $jobs at a time (work dir $work)"
