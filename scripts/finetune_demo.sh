#!/usr/bin/env bash
# Fine-tuning a Hugging Face model on chat data, end to end (README "Fine-tuning a Hugging Face
# model"): a small Llama-shaped model that transformers writes at random, with a tokenizer trained
# here and Llama 3.1's chat template (scripts/finetune/make_model.py) ->
#   megatrain import                      its safetensors and config.json become a checkpoint
#   megatrain preprocess --format chat    scripts/finetune/chat.jsonl (240 conversations written for
#                                         this demo) rendered with the template, assistant text learned
#   megatrain train                       packed conversations kept apart (reset_attention_mask,
#                                         reset_position_ids), loss on the answers only
#   megatrain export                      back to a Hugging Face folder
# -> transformers loads the export; its logits on a chat prompt must equal megatrain's, and it
# answers a question (scripts/finetune/check_logits.py).
#   bash scripts/finetune_demo.sh [ARGS...]   ARGS go to `megatrain train` (e.g. --set train.steps=50)
# MEGATRAIN_BIN overrides the binary (default build/megatrain), FINETUNE_OUT the folder (default
# runs/finetune), FINETUNE_STEPS the training steps (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
py=build/pyref/bin/python3
logits=build/tests/reference/checkpoint_logits
template=build/_deps/minja/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
for need in "$bin" "$py" "$logits" "$template"; do
  [ -e "$need" ] || { echo "finetune_demo: $need not found; run scripts/setup.sh first" >&2; exit 2; }
done
out=${FINETUNE_OUT:-runs/finetune}
steps=${FINETUNE_STEPS:-300}
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

"$py" scripts/finetune/make_model.py --chat scripts/finetune/chat.jsonl --template "$template" --out "$out/hf"
"$bin" import --hf "$out/hf" --out "$out/imported" --config-out "$out/imported.toml"
"$bin" preprocess --format chat --tokenizer "$out/hf/tokenizer.json" --input scripts/finetune/chat.jsonl \
  --output-prefix "$out/chat" --max-tokens 257
eod=$("$py" -c "import json,sys; print(next(t['id'] for t in json.load(open(sys.argv[1]))['added_tokens'] \
  if t['content'] == '<|end_of_text|>'))" "$out/hf/tokenizer.json")
"$bin" train --config "$out/imported.toml" \
  --set checkpoint.load="\"$out/imported\"" --set checkpoint.dir="\"$out/ckpt\"" \
  --set data.train="\"$out/chat\"" --set data.eod_token="$eod" \
  --set data.reset_attention_mask=true --set data.reset_position_ids=true --set data.eod_mask_loss=true \
  --set train.seq_len=256 --set train.micro_batch_size=4 --set train.global_batch_size=8 \
  --set train.steps=$steps --set train.eval_interval=0 --set checkpoint.save_interval=$steps \
  --set optimizer.lr=3e-3 --set optimizer.min_lr=3e-4 --set optimizer.warmup_steps=20 \
  --set log.interval=50 --set log.metrics_file="\"$out/metrics.jsonl\"" "$@"
"$bin" export --checkpoint "$out/ckpt" --out "$out/exported"
cp "$out/hf/tokenizer.json" "$out/hf/tokenizer_config.json" "$out/exported/"
"$py" scripts/finetune/check_logits.py --exported "$out/exported" --checkpoint "$out/ckpt" --logits-tool "$logits" \
  --question "What is 12 + 30?"
echo "finetune_demo: the fine-tuned model, in Hugging Face's format, is in $out/exported"
