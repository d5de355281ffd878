#!/usr/bin/env bash
# Checks scripts/scaling.py.
#  1. Its arithmetic, on metrics files written here (--from-dir): per layout the median over
#     repetitions of each run's mean after the warm-up, ideal = base tokens/s per rank × ranks,
#     efficiency, exposed communication, bubble, memory; weak scaling's global batches.
#  2. Its errors: a bad layout, a missing run, a weak batch that does not divide: exit 2, named.
#  3. A real sweep: serial and dp=2 (2 ranks) of a tiny model, 4 steps each, table and PNG.
# Run:  bash tests/scripts/test_scaling.sh build/megatrain   (ctest: scaling_script, label e2e)
set -euo pipefail
bin=$(realpath "${1:?usage: test_scaling.sh PATH/TO/megatrain}")
root="$(cd "$(dirname "$0")/../.." && pwd)"
script="$root/scripts/scaling.py"
py=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# step_line STEP TOKENS_PER_S STEP_MS DP_EXPOSED TP_EXPOSED PP_IDLE_LIST
step_line() {
  echo "{\"step\": $1, \"loss\": 5.0, \"tokens_per_s\": $2, \"step_time_ms\": $3, \"exposed_comm_ms\": $4, \"tp_exposed_ms\": $5, \"ep_exposed_ms\": 0.0, \"pp_idle_ms\": $6, \"memory_bytes\": {\"params\": 1048576, \"grads\": 1048576, \"peak_rss\": 104857600}}"
}
d=$tmp/synthetic
mkdir -p "$d"
# serial: warm-up step 1 is ignored; mean of steps 2-3 = 1000 tok/s.
{ step_line 1 10 900 0 0 "[0]"; step_line 2 900 100 0 0 "[0]"; step_line 3 1100 100 0 0 "[0]"; } > "$d/serial_r1.jsonl"
# dp2: three repetitions with means 1500, 1800, 1700 -> median 1700; exposed dp 4 ms.
for r in 1:1500 2:1800 3:1700; do
  { step_line 1 1 1 0 0 "[0]"; step_line 2 "${r#*:}" 200 4 0 "[0]"; } > "$d/dp2_r${r%%:*}.jsonl"
done
# tp2_pp2: 4 ranks, 2400 tok/s; stage idle 30 and 10 ms of a 200 ms step -> bubble 10 %.
{ step_line 1 1 1 0 0 "[0,0]"; step_line 2 2400 200 0 6 "[30,10]"; } > "$d/tp2_pp2_r1.jsonl"
out=$("$py" "$script" strong --from-dir --config x.toml --out "$d" --global-batch 8 --warmup 1 --steps 2 \
      --layout dp=1 --layout dp=2 --layout tp=2,pp=2)
echo "$out"
grep -q '| serial | 1 | 8 | 1000 | 1000 | 1.00 | 100 | 0.0 / 0.0 / 0.0 | 0.0 % | 2 | 100 | 1 |' <<<"$out" || fail "serial row"
grep -q '| dp2 | 2 | 8 | 1700 | 2000 | 0.85 | 200 | 4.0 / 0.0 / 0.0 |' <<<"$out" || fail "dp2 row (median of 3, efficiency 0.85)"
grep -q '| dp2 .* | 3 |$' <<<"$out" || fail "dp2 row counts 3 runs"
grep -q '| tp2_pp2 | 4 | 8 | 2400 | 4000 | 0.60 | 200 | 0.0 / 6.0 / 0.0 | 10.0 % |' <<<"$out" || fail "tp2_pp2 row (bubble 10 %)"
[ -s "$d/scaling.png" ] && [ -s "$d/scaling.md" ] || fail "no table file or plot"
# Weak scaling: the global batch grows with the ranks (8 at 1 rank, 16 at 2, 32 at 4).
out=$("$py" "$script" weak --from-dir --config x.toml --out "$d" --global-batch 8 --warmup 1 --steps 2 \
      --layout dp=1 --layout dp=2 --layout tp=2,pp=2)
grep -q '| dp2 | 2 | 16 |' <<<"$out" && grep -q '| tp2_pp2 | 4 | 32 |' <<<"$out" || fail "weak batches"

expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1; shift
  set +e; err=$("$py" "$script" "$@" 2>&1 >/dev/null); rc=$?; set -e
  [ "$rc" = 2 ] || fail "exit $rc (want 2) for: $*"
  grep -q "$pattern" <<<"$err" || fail "error '$err' lacks '$pattern'"
}
expect_error "expected comma-separated KEY=N" strong --from-dir --config x --out "$d" --global-batch 8 --layout tq=2
expect_error "ep=2 must divide dp=1" strong --from-dir --config x --out "$d" --global-batch 8 --layout ep=2
expect_error "no metrics file dp4_rREP.jsonl" strong --from-dir --config x --out "$d" --global-batch 8 --warmup 1 --layout dp=4
expect_error "not a multiple of the first layout's 2 ranks" weak --from-dir --config x --out "$d" --global-batch 3 --layout dp=2 --layout dp=1
expect_error "no step after the 5 warm-up steps" strong --from-dir --config x --out "$d" --global-batch 8 --warmup 5 --steps 6 --layout dp=1

# A real sweep of a tiny model.
source "$root/tests/tiny_model.sh"
tiny_model "$bin" "$tmp" 4 8
out=$("$py" "$script" strong --config "$tmp/tiny.toml" --bin "$bin" --out "$tmp/real" --global-batch 8 \
      --steps 4 --warmup 1 --layout dp=1 --layout dp=2)
echo "$out"
echo "$out" | grep -Eq '^\| serial \| 1 \| 8 \| [0-9]+ \| [0-9]+ \| 1\.00 \|' || fail "real serial row"
echo "$out" | grep -Eq '^\| dp2 \| 2 \| 8 \| [0-9]+ \| [0-9]+ \| [0-9.]+ \|' || fail "real dp2 row"
[ "$(grep -c '"step_time_ms"' "$tmp/real/dp2_r1.jsonl")" = 4 ] || fail "dp2 run did not log 4 steps"
[ -s "$tmp/real/scaling.png" ] || fail "no plot of the real sweep"
echo "scaling.py: arithmetic, errors and a real 2-layout sweep as expected"
