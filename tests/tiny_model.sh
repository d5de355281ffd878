# Sourced by the shell tests and benches that train a tiny GPT: the model of the C++ end-to-end
# tests (tests/e2e/e2e_fixture.h: 2 layers, d_model 64, 4 heads, byte vocabulary, sequences of 64)
# on a fortunes file.
#   tiny_model BIN DIR MICRO GLOBAL [STEPS]
# tokenizes /usr/share/games/fortunes/science (one document per fortune) into DIR/data and writes
# DIR/tiny.toml: micro-batches of MICRO, global batch GLOBAL, STEPS steps (else the default), a log
# line and a metrics row every step, no peak FLOP/s (no MFU column). Settings a caller needs beyond
# these go on its command line (--set).
tiny_model() {
  local bin=$1 dir=$2 micro=$3 global=$4 steps=${5:-}
  local input=/usr/share/games/fortunes/science
  [ -f "$input" ] || { echo "$input missing (Debian package fortunes): run scripts/setup.sh" >&2; return 1; }
  "$bin" preprocess --tokenizer bytes --doc-separator % --input "$input" --output-prefix "$dir/data" >/dev/null ||
    { echo "tiny_model: preprocessing $input failed" >&2; return 1; }
  cat > "$dir/tiny.toml" <<TOML
[model]
n_layers = 2
d_model = 64
n_heads = 4
vocab_size = 257
max_seq_len = 64
[train]
seq_len = 64
micro_batch_size = $micro
global_batch_size = $global
${steps:+steps = $steps}
[data]
train = "$dir/data"
[log]
interval = 1
peak_tflops = 0
TOML
}
