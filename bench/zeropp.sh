#!/usr/bin/env bash
# ZeRO++ against exact ZeRO stage 3: configs/demo.toml on 4 data-parallel ranks (one micro-batch
# of 8 each, global batch 32) with no switch (exact), qwZ (parallel.zero_quantized_weights), qgZ
# (parallel.zero_quantized_gradients), hpZ (parallel.zero_hpz_partition_size = 2: two groups of
# two ranks) and all three, the same seed and data; prints each run's data-parallel bytes per step
# per rank (metrics comm_bytes) and per group of 4 ranks (× 4: every rank moves the same volume up
# to the partitions' rounding), of which hpZ's within its group (hpz_comm_bytes), the ratio to the
# exact run's, the validation loss at each evaluation and the last training loss, and overlays the
# curves (scripts/plot_metrics.py).
#   bench/zeropp.sh [DIR]        (DIR default runs/zeropp)
# Environment: MEGATRAIN_BIN (build/megatrain), STEPS (60; ≥ 30, the demo's warm-up), BLOCK (256,
# parallel.zero_quant_block), SKIP_RUNS=1 (only summarise DIR). The data (runs/demo/fortunes_*) is
# made by `bash scripts/demo.sh --data-only` when missing. Runs are `mpirun --oversubscribe -np 4`
# with one thread per rank and `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (bench/RESULTS.md); no
# checkpoints. The losses and bytes do not depend on the machine's load; the step times do.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/zeropp}
steps=${STEPS:-60}
block=${BLOCK:-256}
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ "$steps" -ge 30 ] || { echo "$0: STEPS=$steps is below the demo's 30 warm-up steps" >&2; exit 2; }
mkdir -p "$dir"
methods="exact qwz qgz hpz all"
switches() {
  case $1 in
    exact) echo "" ;;
    qwz) echo "--set parallel.zero_quantized_weights=true" ;;
    qgz) echo "--set parallel.zero_quantized_gradients=true" ;;
    hpz) echo "--set parallel.zero_hpz_partition_size=2" ;;
    all) echo "$(switches qwz) $(switches qgz) $(switches hpz)" ;;
  esac
}

if [ "${SKIP_RUNS:-0}" != 1 ]; then
  if [ ! -s runs/demo/fortunes_train.idx ] || [ ! -s runs/demo/fortunes_valid.idx ]; then
    MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
  fi
  for m in $methods; do
    echo "== $m: $steps steps on 4 ranks, $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -f "$dir/$m.jsonl"
    # shellcheck disable=SC2046  # the switches are separate words
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun --oversubscribe -np 4 -x OMP_NUM_THREADS=1 \
      "$bin" train --config configs/demo.toml --set train.steps="$steps" --set train.micro_batch_size=8 \
      --set train.global_batch_size=32 --set train.eval_interval=20 --set parallel.zero_stage=3 \
      --set parallel.zero_quant_block="$block" $(switches "$m") \
      --set checkpoint.save_interval=0 --set checkpoint.dir='""' --set log.interval=1 \
      --set log.metrics_file="\"$dir/$m.jsonl\"" > "$dir/$m.log" 2>&1 ||
      { echo "$0: $m run failed; see $dir/$m.log" >&2; tail -5 "$dir/$m.log" >&2; exit 1; }
    grep -E '^step +[0-9]+/' "$dir/$m.log" | tail -1
  done
fi

/usr/bin/python3 - "$dir" $methods <<'PY'
import json, statistics, sys
d, methods = sys.argv[1], sys.argv[2:]
rows = {}
for m in methods:
    lines = [json.loads(l) for l in open(f"{d}/{m}.jsonl") if l.strip()]
    steps = [l for l in lines if "step_time_ms" in l]
    vals = [(l["step"], l["val_loss"]) for l in lines if "val_loss" in l]
    rows[m] = dict(bytes=statistics.median(l["comm_bytes"] for l in steps[1:]),
                   intra=statistics.median(l.get("hpz_comm_bytes", 0) for l in steps[1:]), loss=steps[-1]["loss"],
                   vals=vals, ms=statistics.median(l["step_time_ms"] for l in steps[1:]))
exact = rows[methods[0]]["bytes"]
print("| method | dp bytes/step/rank | per group (4 ranks) | of which within hpZ group | vs exact | last loss | "
      "val loss (step: loss) | step ms (median) |")
print("|---|---|---|---|---|---|---|---|")
for m, r in rows.items():
    vals = ", ".join(f"{s}: {v:.3f}" for s, v in r["vals"])
    print(f"| {m} | {r['bytes']:.0f} | {4 * r['bytes']:.0f} | {r['intra']:.0f} | {r['bytes'] / exact:.3f} | "
          f"{r['loss']:.3f} | {vals} | {r['ms']:.0f} |")
PY
/usr/bin/python3 scripts/plot_metrics.py $(for m in $methods; do echo "$dir/$m.jsonl"; done) -o "$dir/curves.png"
echo "curves: $dir/curves.png"
