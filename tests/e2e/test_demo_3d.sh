#!/usr/bin/env bash
# README's 3D run, as README shows it: `bash scripts/demo_3d.sh` (tp = pp = dp = 2 on 8 ranks) must
# finish its 30 steps with both validations, report every stage's pipeline idle time, and lower
# the loss (step 30 below step 5).
# Run:  bash tests/e2e/test_demo_3d.sh build/megatrain    (ctest runs it as `demo_3d`, label e2e)
set -euo pipefail
bin=$(realpath "${1:?usage: test_demo_3d.sh PATH/TO/megatrain}")
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$(MEGATRAIN_BIN=$bin DEMO3D_DIR=$dir bash scripts/demo_3d.sh 2>&1) || { echo "$out"; echo "FAIL: demo_3d.sh exited non-zero"; exit 1; }
echo "$out"
loss_at() { echo "$out" | sed -n "s/^step *$1\/30 | loss \([0-9.]*\) .*/\1/p"; }
first=$(loss_at 5) last=$(loss_at 30)
[ -n "$first" ] && [ -n "$last" ] || { echo "FAIL: no step 5 or step 30 line"; exit 1; }
[ "$(grep -c 'val_loss' <<<"$out")" -ge 2 ] || { echo "FAIL: fewer than 2 validations"; exit 1; }
grep -q 'tp = 2 (sequence parallel), pp = 2' <<<"$out" || { echo "FAIL: not the 3D layout"; exit 1; }
grep -q 'dp = 2' <<<"$out" || { echo "FAIL: not dp = 2"; exit 1; }
grep -Eq 'pp idle [0-9.]+/[0-9.]+ ms' <<<"$out" || { echo "FAIL: no per-stage idle time"; exit 1; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "FAIL: loss $first at step 5, $last at step 30"; exit 1; }
echo "demo_3d: loss $first at step 5 -> $last at step 30"
