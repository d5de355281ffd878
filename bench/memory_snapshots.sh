#!/usr/bin/env bash
# What memory snapshots (checkpoint.memory_interval, docs/robustness.md R26) cost a step: the GPT-2
# 124M shape (configs/gpt2_124m.toml, B 1 × T 1024 per rank, ZeRO 1) on RANKS ranks, one per virtual
# host (MEGATRAIN_RANKS_PER_NODE=1, so every snapshot also goes to a buddy), on the demo's data
# (scripts/demo.sh --data-only), REPS runs of STEPS steps without snapshots and with one every
# INTERVAL steps, alternating; the mean step time over each run's steps after the first SKIP (a mean,
# as a snapshot every k steps costs in spikes; the first three snapshots create their files — on a
# fresh machine 7–10 s of page clearing each — later ones rewrite the spare), then the median over
# runs and the cost of all runs' steps pooled. From the runs' MEMORY_SNAPSHOT_COST lines: what the
# steps waited for the snapshots (their direct cost) and the CPU time of the thread that copies and
# exchanges them, its median over the snapshots (what one takes from the compute when the compute
# keeps every core busy, as here).
#   bench/memory_snapshots.sh [DIR]        (DIR default runs/bench_memory_snapshots)
# Environment: MEGATRAIN_BIN (build/megatrain), RANKS (2), REPS (3), STEPS (16), SKIP (4), INTERVAL (1).
# Runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they halve OpenBLAS on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${MEGATRAIN_BIN:-build/megatrain}")
dir=${1:-runs/bench_memory_snapshots}
ranks=${RANKS:-2}
reps=${REPS:-3}
steps=${STEPS:-16}
skip=${SKIP:-4}
interval=${INTERVAL:-1}
[ -x "$bin" ] || { echo "$0: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
[ -e runs/demo/fortunes_train.idx ] || MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
mkdir -p "$dir"
shm=/dev/shm/megatrain_bench_$$
trap 'rm -rf "$shm"' EXIT
grep -m1 "model name" /proc/cpuinfo
grep -m1 -o -w -E "avx512f|avx512_bf16|amx_bf16|avx2" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
run() {  # NAME FLAGS...
  local name=$1
  shift
  rm -rf "$dir/ckpt_$name" "$shm"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MEGATRAIN_RANKS_PER_NODE=1 mpirun --oversubscribe --bind-to none -np "$ranks" -x OMP_NUM_THREADS=1 \
    -x MEGATRAIN_RANKS_PER_NODE "$bin" train --config configs/gpt2_124m.toml --set data.train=runs/demo/fortunes_train \
    --set parallel.zero_stage=1 --set train.micro_batch_size=1 --set train.global_batch_size="$ranks" \
    --set train.steps="$steps" --set optimizer.warmup_steps=2 --set log.interval=1 --set log.peak_tflops=0 --set checkpoint.dir="$dir/ckpt_$name" \
    --set log.metrics_file="$dir/$name.jsonl" "$@" > "$dir/$name.log" 2>&1
  rm -rf "$shm"
}
for r in $(seq "$reps"); do
  rm -f "$dir/off_$r.jsonl" "$dir/on_$r.jsonl"
  run "off_$r"
  run "on_$r" --set checkpoint.memory_interval="$interval" --set checkpoint.memory_keep=1 \
    --set checkpoint.memory_dir="$shm"
done
grep -h "memory snapshots: every" "$dir"/on_*.log | head -1
/usr/bin/python3 - "$dir" "$reps" "$interval" "$skip" <<'PY'
import json, re, statistics, sys
d, reps, interval, skip = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def mean_step(name):
    ms = [json.loads(l)["step_time_ms"] for l in open(f"{d}/{name}.jsonl") if "step_time_ms" in l]
    return statistics.mean(ms[skip:])
off = [mean_step(f"off_{r}") for r in range(1, reps + 1)]
on = [mean_step(f"on_{r}") for r in range(1, reps + 1)]
print("per run (ms): without " + ", ".join(f"{x:.0f}" for x in off) + "; with " + ", ".join(f"{x:.0f}" for x in on))
a, b = statistics.median(off), statistics.median(on)
print(f"mean step time after step {skip} (median over {reps} runs): without snapshots {a:.0f} ms, with one every "
      f"{interval} steps {b:.0f} ms ({100 * (b / a - 1):+.1f} %); all runs' steps pooled: {100 * (sum(on) / sum(off) - 1):+.1f} %")
cost = [dict((k, float(v)) for k, v in re.findall(r"(\w+_ms)=([0-9.]+)", l))
        for r in range(1, reps + 1) for l in open(f"{d}/on_{r}.log") if "MEMORY_SNAPSHOT_COST" in l]
if cost:
    mean = {k: statistics.mean(c[k] for c in cost) for k in cost[0]}
    print(f"per snapshot (mean over {len(cost)} rank-runs): the step waited {mean['mean_wait_ms']:.0f} ms "
          f"({100 * mean['mean_wait_ms'] / a:.1f} % of a step; at most {max(c['max_wait_ms'] for c in cost):.0f} ms), "
          f"copy {mean['mean_copy_ms']:.0f} ms and store {mean['mean_store_ms']:.0f} ms beside the step, "
          f"the thread's CPU {mean['mean_thread_cpu_ms']:.0f} ms, median {mean['median_thread_cpu_ms']:.0f} ms "
          f"({100 * mean['median_thread_cpu_ms'] / a:.1f} % of a step)")
PY
