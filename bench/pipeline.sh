#!/usr/bin/env bash
# Pipeline benchmark: pp = 4 stages, m = 8 micro-batches per step, one thread per rank, on an
# 8-block model (d_model 384, 6 heads, byte vocabulary, seq 256, micro-batch 1); and the same at
# pp = 2 (cases pp2_*), where the ranks do not outnumber a 2-core machine's cores. Per schedule,
# every stage's idle time per step as the trainer measures it (pp_idle_ms) beside what the
# simulator predicts from this machine's own F, B and W times (build/bench/pipeline_costs); and
# rank 0's activation memory per schedule and recompute mode.
#   bench/pipeline.sh [DIR]          (DIR default runs/bench_pipeline)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (3), STEPS (5; the first WARMUP=2 are
# discarded), CASES (subset of the cases below), SKIP_RUNS=1 (only summarise DIR's metrics files).
# Cases: gpipe, 1f1b, interleaved (2 chunks per rank), zero_bubble with no recompute; 1f1b_selective
# and 1f1b_full with train.recompute = selective / full; pp2_{gpipe,1f1b,interleaved,zero_bubble}.
# Runs go through bench/run_cases.sh (mpirun, OMP_NUM_THREADS=1 per rank, OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset; bench/RESULTS.md), repetitions interleaved.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
costs_bin=${PIPELINE_COSTS_BIN:-build/bench/pipeline_costs}
dir=${1:-runs/bench_pipeline}
reps=${REPS:-3}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
all_cases="gpipe 1f1b interleaved zero_bubble 1f1b_selective 1f1b_full pp2_gpipe pp2_1f1b pp2_interleaved pp2_zero_bubble"
cases=${CASES:-$all_cases}
model="--set model.n_layers=8 --set model.d_model=384 --set model.n_heads=6 --set model.vocab_size=257 \
--set model.max_seq_len=256 --set train.seq_len=256 --set parallel.pp=4"
case_args() {
  case $1 in
    pp2_interleaved) echo 2 ${model/pp=4/pp=2} --set parallel.pipeline_schedule=interleaved --set parallel.virtual_stages=2 ;;
    pp2_*) echo 2 ${model/pp=4/pp=2} --set parallel.pipeline_schedule=${1#pp2_} ;;
    gpipe | 1f1b | zero_bubble) echo 4 $model --set parallel.pipeline_schedule=$1 ;;
    interleaved) echo 4 $model --set parallel.pipeline_schedule=interleaved --set parallel.virtual_stages=2 ;;
    1f1b_selective) echo 4 $model --set train.recompute=selective ;;
    1f1b_full) echo 4 $model --set train.recompute=full ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}
[ -x "$costs_bin" ] || { echo "$0: $costs_bin not found; build it (cmake --build build --target pipeline_costs)" >&2; exit 2; }

global_batch=8
source bench/run_cases.sh

for p in 4 2; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 "$costs_bin" --layers 8 --d-model 384 --heads 6 \
    --stages $p --micro-batches 8 --seq-len 256 | if [ $p = 2 ]; then sed 's/^predicted /predicted pp2_/'; else cat; fi
done > "$dir/predicted.txt"
cat "$dir/predicted.txt"

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
rows = load_runs(d, warm, ("step_time_ms", "pp_comm_ms"))
if not rows:
    sys.exit(f"no metrics files in {d}")
predicted = {}
for line in open(f"{d}/predicted.txt"):
    if line.startswith("predicted "):
        f = line.split()
        predicted[f[1]] = [float(x) for x in f[2:-1]] + [float(f[-1])]
# The per-stage idle lists, averaged over the measured steps of each run, then the median over runs.
import glob, json, os, re
idle = {}
for path in sorted(glob.glob(os.path.join(d, "*_r*.jsonl"))):
    case = re.sub(r"_r\d+\.jsonl$", "", os.path.basename(path))
    kept = [json.loads(l) for l in open(path) if '"pp_idle_ms"' in l]
    kept = [m for m in kept if m["step"] > warm]
    if kept:
        n = len(kept[0]["pp_idle_ms"])
        idle.setdefault(case, []).append([sum(m["pp_idle_ms"][s] for m in kept) / len(kept) for s in range(n)])
MiB = 1 << 20
print(f"\nmedian over runs of each run's mean over steps > {warm}; times in ms")
print(f"{'case':<15} {'runs':>4} {'step':>7} {'idle per stage, measured':>30} {'predicted':>30} {'act. MiB':>8}")
for case in [c for c in order if c in rows]:
    rs = rows[case]
    step = statistics.median(r["step_time_ms"] for r in rs)
    meas = [statistics.median(run[s] for run in idle[case]) for s in range(len(idle[case][0]))]
    pred = predicted.get(case)
    pred_text = " ".join(f"{x:.0f}" for x in pred[:-1]) if pred else "-"
    print(f"{case:<15} {len(rs):>4} {step:>7.0f} {' '.join(f'{x:.0f}' for x in meas):>30} {pred_text:>30} "
          f"{rs[0]['memory']['activations'] / MiB:>8.1f}")
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
PY
