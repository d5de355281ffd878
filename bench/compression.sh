#!/usr/bin/env bash
# Gradient compression against the exact all-reduce: configs/demo.toml on 2 data-parallel ranks
# (one micro-batch of 16 each, global batch 32) with parallel.grad_compression = none, powersgd
# (r = POWERSGD_RANK) and onebit, the same seed and data; prints each run's data-parallel bytes per
# step (metrics comm_bytes), its ratio to the exact run's, the validation loss at each evaluation
# and the last training loss, and overlays the curves (scripts/plot_metrics.py).
#   bench/compression.sh [DIR]        (DIR default runs/compression)
# Environment: MEGATRAIN_BIN (build/megatrain), STEPS (400, the demo's; ≥ 30, the warm-up),
# POWERSGD_RANK (4), RUN="powersgd onebit" (run only these; the others are summarised from DIR),
# SKIP_RUNS=1 (only summarise DIR). The data (runs/demo/fortunes_*) is made by
# `bash scripts/demo.sh --data-only` when missing. Runs are `mpirun --oversubscribe -np 2` with one
# thread per rank and `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (bench/RESULTS.md); no
# checkpoints. The losses and bytes do not depend on the machine's load; the step times do.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/compression}
steps=${STEPS:-400}
rank=${POWERSGD_RANK:-4}
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ "$steps" -ge 30 ] || { echo "$0: STEPS=$steps is below the demo's 30 warm-up steps" >&2; exit 2; }
mkdir -p "$dir"
methods="none powersgd onebit"

if [ "${SKIP_RUNS:-0}" != 1 ]; then
  if [ ! -s runs/demo/fortunes_train.idx ] || [ ! -s runs/demo/fortunes_valid.idx ]; then
    MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
  fi
  for m in ${RUN:-$methods}; do
    echo "== $m: $steps steps on 2 ranks, $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -f "$dir/$m.jsonl"
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 \
      "$bin" train --config configs/demo.toml --set train.steps="$steps" --set train.micro_batch_size=16 \
      --set train.global_batch_size=32 --set parallel.grad_compression="$m" --set parallel.powersgd_rank="$rank" \
      --set checkpoint.save_interval=0 --set checkpoint.dir='""' \
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
    rows[m] = dict(bytes=statistics.median(l["comm_bytes"] for l in steps[1:]), loss=steps[-1]["loss"],
                   vals=vals, ms=statistics.median(l["step_time_ms"] for l in steps[1:]))
exact = rows[methods[0]]["bytes"]
print(f"| method | dp bytes/step | vs exact | last loss | val loss (step: loss) | step ms (median) |")
print("|---|---|---|---|---|---|")
for m, r in rows.items():
    vals = ", ".join(f"{s}: {v:.3f}" for s, v in r["vals"])
    print(f"| {m} | {r['bytes']:.0f} | {r['bytes'] / exact:.3f} | {r['loss']:.3f} | {vals} | {r['ms']:.0f} |")
PY
/usr/bin/python3 scripts/plot_metrics.py $(for m in $methods; do echo "$dir/$m.jsonl"; done) -o "$dir/curves.png"
echo "curves: $dir/curves.png"
