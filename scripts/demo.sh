#!/usr/bin/env bash
# The CPU demo: trains a byte-level BPE tokenizer (vocabulary 4096) on Debian's fortune files,
# tokenizes them with it (one fortune = one document; wisdom and linux held out for validation),
# trains configs/demo.toml on them, draws the curves, and prints a sample from the trained model,
# decoded with the tokenizer.
#   bash scripts/demo.sh [ARGS...]    ARGS go to `megatrain train` (e.g. --set train.steps=50)
#   bash scripts/demo.sh --data-only  only the tokenizer and the data (for bench/moe_vs_dense.sh)
# MEGATRAIN_BIN overrides the binary (default build/megatrain).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
corpus=/usr/share/games/fortunes
data_only=0
if [ "${1:-}" = --data-only ]; then data_only=1; shift; fi
[ -x "$bin" ] || { echo "demo: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
[ -d "$corpus" ] || { echo "demo: $corpus not found; run scripts/setup.sh (Debian package fortunes)" >&2; exit 2; }

mkdir -p runs/demo
valid=("$corpus/wisdom" "$corpus/linux")
train=()
for f in "$corpus"/*; do
  case "$f" in *.dat|*.u8|*/wisdom|*/linux) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && train+=("$f")
done
tok=runs/demo/tokenizer.json  # its vocabulary size is configs/demo.toml's model.vocab_size
"$bin" tokenizer train --input "${train[@]}" --vocab-size 4096 --output "$tok"
"$bin" preprocess --input "${train[@]}" --tokenizer "$tok" --doc-separator % --output-prefix runs/demo/fortunes_train
"$bin" preprocess --input "${valid[@]}" --tokenizer "$tok" --doc-separator % --output-prefix runs/demo/fortunes_valid
if [ "$data_only" = 1 ]; then echo "demo: tokenizer and data in runs/demo"; exit 0; fi

OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} "$bin" train --config configs/demo.toml "$@"

if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py runs/demo/metrics.jsonl -o runs/demo/curves.png
  echo "demo: curves in runs/demo/curves.png"
fi

if [ -f runs/demo/ckpt/latest ]; then
  echo "demo: a sample from the trained model (megatrain generate):"
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} "$bin" generate --checkpoint runs/demo/ckpt --tokenizer "$tok" \
    --prompt "The first law of" --temperature 0.8 --top-k 40 --max-new-tokens 80 --seed 1
else
  echo "demo: no checkpoint in runs/demo/ckpt (checkpoint.save_interval > train.steps?); no sample"
fi
