#!/usr/bin/env bash
# optimizer.state_dtype: the demo (configs/demo.toml, 400 steps, validation every 50) trained with
# AdamW's moments in float32 and in bf16, one after the other in one process on OMP_NUM_THREADS
# threads, with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (the machine's own BLAS kernels).
#   bench/optimizer_states.sh [DIR]     (DIR default runs/bench_optimizer_states)
# Environment: MEGATRAIN_BIN (default build/megatrain), STEPS (400), OMP_NUM_THREADS (nproc).
# Prints the CPU and its flags, then per dtype: the validation losses, the last one's difference
# from float32's, the optimizer bytes the run accounts (the planner's figure: test_plan_e2e), peak
# RSS and the median step time. Needs the demo's data: bash scripts/demo.sh --data-only.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_optimizer_states}
steps=${STEPS:-400}
threads=${OMP_NUM_THREADS:-$(nproc)}
[ -f runs/demo/fortunes_train.bin ] || { echo "$0: no demo data; run bash scripts/demo.sh --data-only" >&2; exit 2; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
mkdir -p "$dir"
for dtype in fp32 bf16; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" "$bin" train --config configs/demo.toml \
    --set train.steps="$steps" --set checkpoint.save_interval=0 --set log.interval=1 \
    --set optimizer.state_dtype="$dtype" --set log.metrics_file="\"$dir/$dtype.jsonl\"" > "$dir/$dtype.log" 2>&1 ||
    { echo "$0: the $dtype run failed; see $dir/$dtype.log" >&2; exit 1; }
done
/usr/bin/python3 - "$dir" <<'PY'
import json, statistics, sys

d = sys.argv[1]
runs = {}
for dtype in ("fp32", "bf16"):
    rows = [json.loads(l) for l in open(f"{d}/{dtype}.jsonl")]
    steps = [r for r in rows if "loss" in r]
    valid = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    runs[dtype] = (steps, valid)
MiB = 1 << 20
last32 = runs["fp32"][1][-1][1]
for dtype, (steps, valid) in runs.items():
    last = valid[-1][1]
    m = steps[-1]["memory_bytes"]
    print(f"{dtype}: validation loss " + " ".join(f"{s}:{v:.6f}" for s, v in valid))
    print(f"  last {last:.6f} ({(last - last32) / last32 * 100:+.4f} % vs fp32) | optimizer {m['optimizer'] / MiB:.2f} MiB"
          f" | peak RSS {m['peak_rss'] / MiB:.1f} MiB | median step {statistics.median(r['step_time_ms'] for r in steps):.1f} ms")
PY
