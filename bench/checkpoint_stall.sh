#!/usr/bin/env bash
# Training stall per checkpoint save, synchronous vs asynchronous, on the demo model, and the
# checkpoint write throughput. Needs the demo data (run scripts/demo.sh once) and build/megatrain.
#   bench/checkpoint_stall.sh [steps=60] [save_interval=10]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
every=${2:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for mode in false true; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 build/megatrain train --config configs/demo.toml \
    --set train.steps="$steps" --set optimizer.warmup_steps=5 --set train.eval_interval=0 --set log.interval=1 \
    --set log.metrics_file="\"$out/m_$mode.jsonl\"" --set checkpoint.dir="\"$out/ckpt_$mode\"" \
    --set checkpoint.save_interval="$every" --set checkpoint.async=$mode --set checkpoint.keep_last=2 \
    > "$out/log_$mode.txt" 2>&1
  step_ms=$(/usr/bin/python3 -c "
import json, statistics, sys
ms = [json.loads(l)['step_time_ms'] for l in open('$out/m_$mode.jsonl') if 'step_time_ms' in l]
print(f'{statistics.median(ms):.1f}')")
  stall=$(grep -o 'training stalled [0-9.]* ms' "$out/log_$mode.txt" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  write=$(grep -o '[0-9.]* MB/s; tensor bytes' "$out/log_$mode.txt" | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "async=$mode  median step ${step_ms} ms (includes the steps that saved)  median stall per save ${stall} ms" \
       " = $(awk -v s="$stall" -v t="$step_ms" 'BEGIN {printf "%.1f", 100*s/t}') % of a step  write ${write} MB/s"
done
