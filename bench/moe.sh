#!/usr/bin/env bash
# Mixture-of-Experts throughput: configs/moe_tiny.toml (8 experts, top-2) against the dense
# configs/demo.toml with the same active parameters, on one rank and on two (dp = 2; the MoE also
# at ep = 2), one thread per rank; the MoE blocks' token-moving time and the expert-parallel
# all-to-all time broken out, and each rank's memory.
#   bench/moe.sh [DIR]          (DIR default runs/bench_moe)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (3), STEPS (10; the first WARMUP=2
# are discarded), CASES (space-separated subset of the cases below; default all), SKIP_RUNS=1
# (only summarise the metrics files already in DIR).
# Cases (every one: the demo's global batch of 32 × seq 128 = 4096 tokens per step, micro-batch 16):
#   dense1     dense, 1 rank (2 micro-batches per step)
#   moe1       MoE, 1 rank
#   dense_dp2  dense, 2 ranks, dp = 2
#   moe_dp2    MoE, 2 ranks, dp = 2, ep = 1 (every rank holds all 8 experts)
#   moe_ep2    MoE, 2 ranks, dp = 2, ep = 2 (4 experts per rank; tokens exchanged by all-to-all)
# Data: runs/demo/fortunes_train (made by `bash scripts/demo.sh --data-only` when missing).
# Repetitions are interleaved (bench/run_cases.sh: mpirun, OMP_NUM_THREADS=1 per rank,
# `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`). The summary prints, per case, the median over
# runs of each run's MEDIAN over the steps > WARMUP of rank 0's step_time_ms, tokens_per_s,
# moe_dispatch_ms, ep_comm_ms, ep_exposed_ms, comm_ms, exposed_comm_ms and comm_bytes; the ratios
# against the dense case of the same rank count and against the same model on one rank are medians
# of per-repetition ratios; and rank 0's memory (params / grads / optimizer / activations).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_moe}
reps=${REPS:-3}
steps=${STEPS:-10}
warmup=${WARMUP:-2}
all_cases="dense1 moe1 dense_dp2 moe_dp2 moe_ep2"
cases=${CASES:-$all_cases}
# Arguments of one case: number of ranks, then train arguments.
case_args() {
  case $1 in
    dense1)    echo 1 --config configs/demo.toml ;;
    moe1)      echo 1 --config configs/moe_tiny.toml ;;
    dense_dp2) echo 2 --config configs/demo.toml ;;
    moe_dp2)   echo 2 --config configs/moe_tiny.toml --set parallel.ep=1 ;;
    moe_ep2)   echo 2 --config configs/moe_tiny.toml --set parallel.ep=2 ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}
for c in $cases; do case_args "$c" > /dev/null; done

# The configs' own data, batch and seq; no start-up GEMM measurement (peak_tflops), no validation.
base_args=(--set train.micro_batch_size=16 --set train.global_batch_size=32 --set log.peak_tflops=0)
global_batch=32
if [ "${SKIP_RUNS:-0}" != 1 ] && [ ! -s runs/demo/fortunes_train.idx ]; then
  MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
fi
source bench/run_cases.sh

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
keys = ("step_time_ms", "tokens_per_s", "moe_dispatch_ms", "ep_comm_ms", "ep_exposed_ms", "comm_ms",
        "exposed_comm_ms", "comm_bytes")
rows = load_runs(d, warm, keys, stat=statistics.median)
if not rows:
    sys.exit(f"no metrics files in {d}")
dense_of = {"dense1": "dense1", "moe1": "dense1", "dense_dp2": "dense_dp2", "moe_dp2": "dense_dp2", "moe_ep2": "dense_dp2"}
one_rank = {"dense1": "dense1", "moe1": "moe1", "dense_dp2": "dense1", "moe_dp2": "moe1", "moe_ep2": "moe1"}


def ratio(case, base):
    """Median over repetitions of case's tokens/s / base's tokens/s in the same repetition."""
    if base not in rows:
        return "–"
    b = {r["rep"]: r["tokens_per_s"] for r in rows[base]}
    rs = [r["tokens_per_s"] / b[r["rep"]] for r in rows[case] if r["rep"] in b]
    return f"{statistics.median(rs):.2f}×" if rs else "–"


MiB = 1 << 20
print(f"\nmedian over runs of each run's median over steps > {warm} (rank 0); times in ms")
print(f"{'case':<10} {'runs':>4} {'step':>6} {'tok/s':>6} {'/dense':>6} {'/1 rank':>7} {'dispatch':>8} "
      f"{'ep comm':>7} {'ep exp':>6} {'dp comm':>7} {'dp exp':>6} {'dp MB':>6}  memory MiB (params/grads/optim/activ)")
for case in [c for c in order if c in rows]:
    rs = rows[case]
    s = {k: statistics.median([r[k] for r in rs]) for k in keys}
    m = rs[0]["memory"]
    mem = "/".join(f"{m[k] / MiB:.2f}" for k in ("params", "grads", "optimizer", "activations"))
    print(f"{case:<10} {len(rs):>4} {s['step_time_ms']:>6.0f} {s['tokens_per_s']:>6.0f} {ratio(case, dense_of[case]):>6} "
          f"{ratio(case, one_rank[case]):>7} {s['moe_dispatch_ms']:>8.1f} {s['ep_comm_ms']:>7.1f} {s['ep_exposed_ms']:>6.1f} "
          f"{s['comm_ms']:>7.1f} {s['exposed_comm_ms']:>6.1f} {s['comm_bytes'] / 1e6:>6.1f}  {mem}")
    print(f"{'':<10} per-run step ms: " + ", ".join(f"{r['step_time_ms']:.0f}" for r in sorted(rs, key=lambda r: r["rep"])))
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
PY
