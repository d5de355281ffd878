#!/usr/bin/env bash
# Mixed-precision benchmark on the GPT-2-124M shape (configs/gpt2_124m.toml): train.precision =
# fp32, bf16 and fp16 in one process on one rank, tokens/s and memory.
#   bench/precision.sh [DIR]          (DIR default runs/bench_precision)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (3), STEPS (4; the first WARMUP=1 are
# discarded), CASES (space-separated subset of: fp32 bf16 fp16; default all), SKIP_RUNS=1 (only
# summarise the metrics files already in DIR).
# Every case: one micro-batch of 1 × seq 1024 = 1024 tokens per step, through bench/run_cases.sh
# (mpirun -np 1, OMP_NUM_THREADS=1, `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`), repetitions
# interleaved. The summary prints the medians over runs of each run's mean over the measured steps
# of step_time_ms and tokens/s, the speed against fp32, and rank 0's memory: the 16-bit parameter
# copy, the float32 masters, gradients, optimizer state, activations, working buffers (the
# unit-sized widened parameters and the GEMMs' 16-bit operand copies) and the process's peak RSS.
# The CPU and its flags are printed first (bench/RESULTS.md quotes them with the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_precision}
reps=${REPS:-3}
steps=${STEPS:-4}
warmup=${WARMUP:-1}
all_cases="fp32 bf16 fp16"
cases=${CASES:-$all_cases}
case_args() {
  case $1 in
    fp32|bf16|fp16) echo 1 --set train.precision="$1" ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile|f16c|avx512fp16)$' | tr '\n' ' ')"
global_batch=1
source bench/run_cases.sh

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
keys = ("step_time_ms", "tokens_per_s")
rows = load_runs(d, warm, keys)
if not rows:
    sys.exit(f"no metrics files in {d}")
MiB = 1 << 20
base = statistics.median([r["tokens_per_s"] for r in rows["fp32"]]) if "fp32" in rows else None
print(f"\nmedian over runs of each run's mean over steps > {warm}; memory of rank 0 in MiB")
print(f"{'case':<6} {'runs':>4} {'step ms':>8} {'tok/s':>7} {'vs fp32':>8} {'params':>7} {'masters':>8} {'grads':>6} "
      f"{'adam':>6} {'activ.':>7} {'work':>5} {'peak RSS':>9}")
for case in [c for c in order if c in rows]:
    rs = rows[case]
    s = {k: statistics.median([r[k] for r in rs]) for k in keys}
    m = rs[0]["memory"]
    ratio = f"{s['tokens_per_s'] / base:.2f}x" if base else "-"
    rss = statistics.median([r["memory"]["peak_rss"] for r in rs]) / MiB
    print(f"{case:<6} {len(rs):>4} {s['step_time_ms']:>8.0f} {s['tokens_per_s']:>7.1f} {ratio:>8} "
          f"{m['params'] / MiB:>7.0f} {m['master_params'] / MiB:>8.0f} {m['grads'] / MiB:>6.0f} "
          f"{m['optimizer'] / MiB:>6.0f} {m['activations'] / MiB:>7.0f} "
          f"{(m['comm_buffers'] + m.get('gemm_scratch', 0)) / MiB:>5.0f} {rss:>9.0f}")
    print(f"{'':<6} per-run step ms: " + ", ".join(f"{r['step_time_ms']:.0f}" for r in rs))
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
PY
