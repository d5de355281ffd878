#!/usr/bin/env bash
# Does a tiny Mixture-of-Experts model reach a lower validation loss than the dense model with the
# same active parameters in the same steps? Trains configs/demo.toml (dense) and
# configs/moe_tiny.toml (8 experts, top-2, equal active parameters) on the demo's data with the
# same batch, schedule and seed, overlays their curves and prints the validation loss at each
# evaluation (train.eval_interval = 50, and at the last step) and the final one.
#   bench/moe_vs_dense.sh [DIR]      (DIR default runs/moe_vs_dense)
# Environment: MEGATRAIN_BIN (default build/megatrain), STEPS (400; ≥ 30, the warm-up), SEED (the
# configs' 1234: init and data order), THREADS (2: OMP_NUM_THREADS of each run), SKIP_RUNS=1 (only
# summarise DIR's metrics files). The losses do not depend on the machine's load; the two runs'
# speeds do (they run one after the other), so they are not compared here: bench/moe.sh does that.
# DIR gets dense.{log,jsonl}, moe.{log,jsonl} and curves.png (scripts/plot_metrics.py). The data
# (runs/demo/fortunes_{train,valid}) is made by `bash scripts/demo.sh --data-only` when missing.
# Every run is `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` (bench/RESULTS.md); no checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/moe_vs_dense}
steps=${STEPS:-400}
threads=${THREADS:-2}
seed=${SEED:-1234}
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ "$steps" -ge 30 ] || { echo "$0: STEPS=$steps is below the configs' 30 warm-up steps" >&2; exit 2; }
mkdir -p "$dir"

if [ "${SKIP_RUNS:-0}" != 1 ]; then
  if [ ! -s runs/demo/fortunes_train.idx ] || [ ! -s runs/demo/fortunes_valid.idx ]; then
    MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
  fi
  for run in dense:configs/demo.toml moe:configs/moe_tiny.toml; do
    name=${run%%:*} cfg=${run#*:}
    echo "== $name ($cfg): $steps steps, seed $seed, $threads thread(s), $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -f "$dir/$name.jsonl"
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" \
      "$bin" train --config "$cfg" --set train.steps="$steps" --set train.seed="$seed" \
      --set checkpoint.save_interval=0 --set checkpoint.dir='""' \
      --set log.metrics_file="\"$dir/$name.jsonl\"" > "$dir/$name.log" 2>&1 ||
      { echo "$0: $name run failed; see $dir/$name.log" >&2; tail -5 "$dir/$name.log" >&2; exit 1; }
    grep -E '^step +[0-9]+/' "$dir/$name.log" | tail -1
  done
fi

for name in dense moe; do
  [ -s "$dir/$name.jsonl" ] || { echo "$0: $dir/$name.jsonl missing; run without SKIP_RUNS" >&2; exit 1; }
done
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py "$dir/dense.jsonl" "$dir/moe.jsonl" -o "$dir/curves.png"
fi

/usr/bin/python3 - "$dir" <<'PY'
import json, sys

d = sys.argv[1]
runs = {}
for name in ("dense", "moe"):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    val = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    if not val:
        sys.exit(f"{d}/{name}.jsonl: no validation losses")
    runs[name] = val
print(f"\n{'step':>6} {'dense val':>10} {'moe val':>10} {'moe - dense':>12}")
for s in sorted(set(runs["dense"]) | set(runs["moe"])):
    dv, mv = runs["dense"].get(s), runs["moe"].get(s)
    diff = f"{mv - dv:+12.4f}" if dv is not None and mv is not None else f"{'':>12}"
    print(f"{s:>6} {dv if dv is not None else float('nan'):>10.4f} {mv if mv is not None else float('nan'):>10.4f} {diff}")
dv, mv = (v[max(v)] for v in runs.values())
print(f"final val loss: dense {dv:.4f}, moe {mv:.4f} ({'moe lower' if mv < dv else 'moe NOT lower'}, {mv - dv:+.4f})")
PY
