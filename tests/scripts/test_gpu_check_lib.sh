#!/usr/bin/env bash
# Checks bench/gpu/check_lib.sh, the parts of the GPU device check that decide what its summary
# says: time boxes under the deadline (a stage that overruns is killed and called TIMEOUT, one that
# cannot start is NOT-RUN), status words, GoogleTest counts and failed names, and medians read from
# metrics files without Python. (ctest gpu_check_lib, label unit)
set -uo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
res=$tmp/res logs=$tmp/logs mode=test
mkdir -p "$res" "$logs"
# shellcheck source=bench/gpu/check_lib.sh
. bench/gpu/check_lib.sh

# Time boxes: the cap, or the time left less 20 s; a command that overruns is killed (124).
deadline_at=$(($(date +%s) + 100))
[ "$(box 30)" = 30 ] || fail "box 30 with 100 s left: $(box 30)"
b=$(box 500)
[ "$b" -ge 78 ] && [ "$b" -le 80 ] || fail "box 500 with 100 s left: $b (want 80 - a second)"
deadline_at=$(($(date +%s) + 22))
start=$(date +%s)
run_boxed 60 "$tmp/slow.log" sleep 30
rc=$?
[ "$rc" = 124 ] || fail "an overrunning command: exit $rc, want 124"
[ $(($(date +%s) - start)) -le 5 ] || fail "the box was not min(cap, left - 20)"
grep -q 'time box 2s' "$tmp/slow.log" || fail "the log does not record the box: $(cat "$tmp/slow.log")"
deadline_at=$(date +%s)
run_boxed 60 "$tmp/late.log" true
[ $? = 125 ] || fail "a stage past the deadline must not start"
deadline_at=$(($(date +%s) + 100))
run_boxed 10 "$tmp/ok.log" sh -c 'echo out; exit 3'
[ $? = 3 ] || fail "the command's own status is returned"
grep -q '^out$' "$tmp/ok.log" || fail "the command's output is logged"

# A signal to the check stops the running stage at once (the device machine's own limit is a kill).
cat >"$tmp/interrupted.sh" <<SCRIPT
cd "$(pwd)"; res=$tmp/res logs=$tmp/logs mode=test; . bench/gpu/check_lib.sh
deadline_at=\$((\$(date +%s) + 100))
trap 'stop_boxed; echo stopped >"$tmp/stopped"; exit 130' TERM
run_boxed 60 "$tmp/long.log" sleep 41
SCRIPT
start=$(date +%s)
bash "$tmp/interrupted.sh" &
pid=$!
sleep 1
kill -TERM "$pid"
wait "$pid"
[ $? = 130 ] && [ -f "$tmp/stopped" ] || fail "the trap did not run on TERM"
[ $(($(date +%s) - start)) -le 5 ] || fail "TERM waited for the stage's command to end"
sleep 1
pgrep -f 'sleep 41' >/dev/null && fail "the stage's command outlived the check"

for pair in 0:PASS 77:SKIP 124:TIMEOUT 137:TIMEOUT 125:NOT-RUN 1:FAIL 2:FAIL; do
  [ "$(status_of "${pair%%:*}")" = "${pair#*:}" ] || fail "status_of ${pair%%:*}: $(status_of "${pair%%:*}")"
done

cat >"$tmp/gtest.log" <<'EOF'
[ RUN      ] OpsParity.Matmul
[       OK ] OpsParity.Matmul (12 ms)
[ RUN      ] OpsParity.Attention
[  FAILED  ] OpsParity.Attention (40 ms)
[ RUN      ] DeviceE2E.TwoRankLayoutsMatchOneCpuProcess
[  SKIPPED ] DeviceE2E.TwoRankLayoutsMatchOneCpuProcess (0 ms)
[ RUN      ] ProductionShapes.CrossEntropy
[  FAILED  ] ProductionShapes.CrossEntropy (7 ms)
[  FAILED  ] 2 tests, listed below:
[  FAILED  ] OpsParity.Attention
[  FAILED  ] ProductionShapes.CrossEntropy
EOF
[ "$(gtest_counts "$tmp/gtest.log")" = "1 passed, 2 failed, 1 skipped" ] ||
  fail "gtest_counts: $(gtest_counts "$tmp/gtest.log")"
[ "$(gtest_failed "$tmp/gtest.log")" = "OpsParity.Attention:ProductionShapes.CrossEntropy" ] ||
  fail "gtest_failed: $(gtest_failed "$tmp/gtest.log")"

# Medians of a metrics file's steps after the warm-up (the compact JSON megatrain writes).
for s in 1:900:0.5 2:110:0.40 3:100:0.41 4:120:0.39; do
  IFS=: read -r step ms mfu <<<"$s"
  echo "{\"step\":$step,\"loss\":5.1,\"step_time_ms\":$ms,\"mfu\":$mfu,\"memory_bytes\":{\"device_peak\":2147483648}}"
done >"$tmp/run.jsonl"
echo '{"step":4,"eval_loss":5.0}' >>"$tmp/run.jsonl"
[ "$(metrics_median "$tmp/run.jsonl" step_time_ms 1)" = 110 ] || fail "median step time: $(metrics_median "$tmp/run.jsonl" step_time_ms 1)"
[ "$(metrics_median "$tmp/run.jsonl" mfu 2)" = 0.4 ] || fail "median of two: $(metrics_median "$tmp/run.jsonl" mfu 2)"
[ "$(json_field device_peak <"$tmp/run.jsonl" | head -1)" = 2147483648 ] || fail "a nested field"
[ -z "$(echo '{"step":1}' | json_field mfu)" ] || fail "an absent field is empty"

# The summary: one row per recorded stage, rewritten as each ends.
record ops PASS 12 "3 passed"
record e2e FAIL 40 "1 failed"
[ "$(grep -c '^ops  *PASS  *12s  3 passed$' "$res/summary.txt")" = 1 ] || fail "summary: $(cat "$res/summary.txt")"
[ "$(grep -c '^e2e  *FAIL' "$res/summary.txt")" = 1 ] || fail "summary row 2: $(cat "$res/summary.txt")"
echo "PASS: check_lib (time boxes, status words, gtest counts, metrics medians, summary rows)"
