#!/usr/bin/env bash
# Tensor-parallel benchmark on the GPT-2-124M shape (configs/gpt2_124m.toml): tp=2 vs tp=1, one
# thread per rank, how much of the tensor-parallel communication the column-parallel backward's
# overlap hides, and the activation memory with sequence parallelism on and off.
#   bench/tp.sh [DIR]          (DIR default runs/bench_tp)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (3), STEPS (4; the first WARMUP=1 are
# discarded), CASES (space-separated subset of the cases below; default all), SKIP_RUNS=1 (only
# summarise the metrics files already in DIR).
# Cases (every one: one micro-batch of 1 × seq 1024 = 1024 tokens per step):
#   tp1             1 rank
#   tp2_on          2 ranks, parallel.overlap_tp_comm = true
#   tp2_off         the same, overlap off (each input-gradient reduction waited for at once)
#   tp2_sp          2 ranks, overlap on, parallel.sequence_parallel = true
# Repetitions are interleaved (rep 1 of every case, then rep 2, ...). DIR keeps the dataset (the
# bytes tokenizer over Debian's /usr/share/common-licenses) and per run a log and a metrics file.
# The summary prints the medians over runs of each run's mean over the measured steps of
# step_time_ms, compute_ms, tp_comm_ms, tp_exposed_ms, their ratio, tokens/s and rank 0's memory.
# Every run is `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (this machine's environment sets
# both; bench/RESULTS.md), OMP_NUM_THREADS=1 per rank (-x), through mpirun (also for tp=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_tp}
reps=${REPS:-3}
steps=${STEPS:-4}
warmup=${WARMUP:-1}
all_cases="tp1 tp2_on tp2_off tp2_sp"
cases=${CASES:-$all_cases}
# Arguments of one case: number of ranks, then --set overrides.
case_args() {
  case $1 in
    tp1)     echo 1 ;;
    tp2_on)  echo 2 --set parallel.tp=2 --set parallel.overlap_tp_comm=true ;;
    tp2_off) echo 2 --set parallel.tp=2 --set parallel.overlap_tp_comm=false ;;
    tp2_sp)  echo 2 --set parallel.tp=2 --set parallel.overlap_tp_comm=true --set parallel.sequence_parallel=true ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}

global_batch=1
source bench/run_cases.sh

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
keys = ("step_time_ms", "compute_ms", "tp_comm_ms", "tp_exposed_ms", "tokens_per_s")
rows = load_runs(d, warm, keys)
if not rows:
    sys.exit(f"no metrics files in {d}")
MiB = 1 << 20
print(f"\nmedian over runs of each run's mean over steps > {warm}; times in ms")
print(f"{'case':<8} {'runs':>4} {'step':>8} {'compute':>8} {'tp comm':>8} {'exposed':>8} {'exp/step':>8} "
      f"{'tok/s':>7} {'activations MiB':>16} {'params MiB':>10}")
for case in [c for c in order if c in rows]:
    rs = rows[case]
    s = {k: statistics.median([r[k] for r in rs]) for k in keys}
    m = rs[0]["memory"]
    print(f"{case:<8} {len(rs):>4} {s['step_time_ms']:>8.0f} {s['compute_ms']:>8.0f} {s['tp_comm_ms']:>8.0f} "
          f"{s['tp_exposed_ms']:>8.0f} {100 * s['tp_exposed_ms'] / s['step_time_ms']:>7.1f}% {s['tokens_per_s']:>7.1f} "
          f"{m['activations'] / MiB:>16.0f} {m['params'] / MiB:>10.0f}")
    print(f"{'':<8} per-run step ms: " + ", ".join(f"{r['step_time_ms']:.0f}" for r in rs))
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
PY
