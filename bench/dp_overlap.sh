#!/usr/bin/env bash
# Data-parallel overlap benchmark on the GPT-2-124M shape (configs/gpt2_124m.toml): dp=2 vs dp=1,
# one thread per rank, and how much of the gradient reduction the bucket overlap hides.
#   bench/dp_overlap.sh [DIR]          (DIR default runs/bench_dp_overlap)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (3), STEPS (6; the first WARMUP=2 are
# discarded), CASES (space-separated subset of the cases below; default all), SKIP_RUNS=1 (only
# summarise the metrics files already in DIR).
# Cases (every one: global batch 2 × micro-batch 1 × seq 1024 = 2048 tokens per step):
#   dp1            1 rank, 2 micro-batches per step
#   dp2_z0_on      2 ranks, 1 micro-batch each, ZeRO 0, parallel.overlap_grad_reduce = true
#   dp2_z0_off     the same, overlap off (all buckets reduced after backward)
#   dp2_z0_on_b100 / dp2_z0_off_b100   as above with 100 MB buckets instead of the default 25 MB
#   dp2_z1_on / dp2_z2_on              ZeRO-1 / ZeRO-2, overlap on, 25 MB buckets
# Repetitions are interleaved (rep 1 of every case, then rep 2, ...) so that load from other
# processes on the machine falls on all cases alike. DIR keeps the dataset (made once, when
# missing: the bytes tokenizer over Debian's /usr/share/common-licenses, 0.3 M tokens; the
# vocabulary of 50257 covers the 257 byte ids) and per run a log and a metrics file
# (log.interval = 1). The summary prints the medians over runs of each run's mean over the
# measured steps of step_time_ms, compute_ms, comm_ms, exposed_comm_ms, exposed/comm, tokens/s,
# comm_bytes per step and the rank-0 memory_bytes, and the dp=2 scaling efficiency
# (tokens/s at dp=2) / (2 × tokens/s at dp=1).
# Every run is `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (this machine's environment sets
# both; bench/RESULTS.md), OMP_NUM_THREADS=1 per rank (-x), through mpirun (also for dp=1) with
# Open MPI's root switches set.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_dp_overlap}
reps=${REPS:-3}
steps=${STEPS:-6}
warmup=${WARMUP:-2}
all_cases="dp1 dp2_z0_on dp2_z0_off dp2_z0_on_b100 dp2_z0_off_b100 dp2_z1_on dp2_z2_on"
cases=${CASES:-$all_cases}
# Arguments of one case: number of ranks, then --set overrides.
case_args() {
  case $1 in
    dp1)             echo 1 ;;
    dp2_z0_on)       echo 2 --set parallel.zero_stage=0 --set parallel.overlap_grad_reduce=true ;;
    dp2_z0_off)      echo 2 --set parallel.zero_stage=0 --set parallel.overlap_grad_reduce=false ;;
    dp2_z0_on_b100)  echo 2 --set parallel.zero_stage=0 --set parallel.overlap_grad_reduce=true --set parallel.bucket_size_mb=100 ;;
    dp2_z0_off_b100) echo 2 --set parallel.zero_stage=0 --set parallel.overlap_grad_reduce=false --set parallel.bucket_size_mb=100 ;;
    dp2_z1_on)       echo 2 --set parallel.zero_stage=1 --set parallel.overlap_grad_reduce=true ;;
    dp2_z2_on)       echo 2 --set parallel.zero_stage=2 --set parallel.overlap_grad_reduce=true ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}

global_batch=2
source bench/run_cases.sh

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" <<'PY'
import re, statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
med = statistics.median
rows = load_runs(d, warm, ("step_time_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "comm_bytes", "tokens_per_s"))
for r in (r for rs in rows.values() for r in rs):
    r["share"] = 100.0 * r["exposed_comm_ms"] / r["comm_ms"] if r["comm_ms"] > 0 else float("nan")
    p = re.search(r"model: (\d+) parameters", open(r["path"][:-len(".jsonl")] + ".log").read())
    r["params"] = int(p.group(1)) if p else 0

if not rows:
    sys.exit(f"no metrics files in {d}")
MiB = 1 << 20
print(f"\nmedian over runs of each run's mean over steps > {warm}; times in ms")
print(f"{'case':<16} {'runs':>4} {'step':>8} {'compute':>8} {'comm':>8} {'exposed':>8} {'exp/comm':>8} "
      f"{'tok/s':>7} {'comm MB/step':>12} {'mem MiB (p/g/opt/act/comm)':>30}")
summary = {}
for case in [c for c in order if c in rows]:
    rs = rows[case]
    s = {k: med([r[k] for r in rs]) for k in ("step_time_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "share",
                                                "tokens_per_s", "comm_bytes")}
    summary[case] = s
    m = rs[0]["memory"]
    mem = "/".join(f"{m[k] / MiB:.0f}" for k in ("params", "grads", "optimizer", "activations", "comm_buffers"))
    print(f"{case:<16} {len(rs):>4} {s['step_time_ms']:>8.0f} {s['compute_ms']:>8.0f} {s['comm_ms']:>8.0f} "
          f"{s['exposed_comm_ms']:>8.0f} {s['share']:>7.1f}% {s['tokens_per_s']:>7.1f} "
          f"{s['comm_bytes'] / 1e6:>12.1f} {mem:>30}")
    spread = ", ".join(f"{r['step_time_ms']:.0f}" for r in rs)
    print(f"{'':<16} per-run step ms: {spread}; per-run exposed/comm: "
          + ", ".join(f"{r['share']:.0f}%" for r in rs))
if "dp1" in summary:
    base = summary["dp1"]["tokens_per_s"]
    for case, s in summary.items():
        if case != "dp1":
            print(f"scaling efficiency {case}: {s['tokens_per_s'] / (2 * base) * 100:.1f} %")
params = next((r["params"] for rs in rows.values() for r in rs if r["params"]), 0)
if params:
    # ZeRO-0 all-reduce: 2·(p−1)/p · 4 B · T for the gradients, plus the loss all-reduce (one double).
    print(f"parameters T = {params}; expected ZeRO-0 dp=2 comm bytes per step 2·(p−1)/p·4·T + 8 = {4 * params + 8}")
for case in [c for c in order if c in rows and c.startswith("dp2")]:
    print(f"  {case}: measured comm_bytes per step = {rows[case][0]['comm_bytes']:.0f}")
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
PY
