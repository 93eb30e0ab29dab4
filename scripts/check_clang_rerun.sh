#!/usr/bin/env bash
# The newcomer's path for the AF_XDP object (crates/io/build.rs): build io with clang
# missing from PATH (an empty xdp_steer.o), then make clang appear in a PATH directory
# without changing PATH, build again, and check that build.rs ran again and compiled the
# program (an ELF object) rather than keeping the stale empty one. Slow (two builds of
# io in a target directory of its own); not part of scripts/test.sh, whose cargo test
# checks the same end state (io afxdp::loader::build_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
clang=$(command -v clang) || { echo "needs clang installed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
# Every tool of clang's directory but clang itself (cc, the linker, ... stay reachable).
for f in "$(dirname "$clang")"/*; do
    case "$(basename "$f")" in clang*) ;; *) ln -s "$f" "$work/bin/";; esac
done
export PATH="$work/bin:$(dirname "$(command -v cargo)")" CARGO_TARGET_DIR="$work/target"
unset CLANG
obj() { ls -t "$CARGO_TARGET_DIR"/debug/build/io-*/out/xdp_steer.o | head -1; }
cargo build -q -p io 2>/dev/null
[ ! -s "$(obj)" ] || { echo "FAIL: clang hidden, yet the object is not empty"; exit 1; }
ln -s "$clang" "$work/bin/clang"
cargo build -q -p io 2>/dev/null
if head -c 4 "$(obj)" | grep -q ELF; then
    echo "ok: build.rs reran when clang appeared ($(stat -c %s "$(obj)") byte object)"
else
    echo "FAIL: clang appeared but the stale empty AF_XDP object was kept"; exit 1
fi
