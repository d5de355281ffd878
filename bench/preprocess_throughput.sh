#!/usr/bin/env bash
# Preprocessing throughput: `megatrain preprocess` with a GPT-2-style byte-level BPE (vocab 32768)
# on a >= 100 MB JSONL corpus of Debian package text, with --workers 1 and 2, 3 runs each
# (alternating), reporting the median MB/s of document text (wall clock, and per CPU-second of
# user + system time, which a shared machine's other load distorts less) and the peak RSS
# (/usr/bin/time -v).
#   bench/preprocess_throughput.sh [DIR]        (DIR default runs/bench_preprocess)
# DIR keeps the corpus (bench/make_debian_corpus.sh), a ~20 MB text slice of it and the tokenizer
# trained on that slice (`megatrain tokenizer train --vocab-size 32768`, GPT-2 pre-tokenizer
# regex); each is made only when missing. The runs unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# (env -u), as every benchmark in bench/RESULTS.md does. Afterwards it checks that both worker
# counts wrote identical datasets and that the dataset reads back (`megatrain data inspect`).
# MEGATRAIN_BIN overrides the binary (default build/megatrain); MB=N sets the corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_preprocess}
[ -x "$bin" ] || { echo "$0: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "$0: /usr/bin/time not found; run scripts/setup.sh (package time)" >&2; exit 2; }
mkdir -p "$dir"
corpus=$dir/corpus.jsonl
slice=$dir/tokenizer_slice.txt
tok=$dir/tokenizer.json
bench=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

[ -s "$corpus" ] || bench/make_debian_corpus.sh "$corpus" "${MB:-100}"
if [ ! -s "$tok" ]; then
  # The first documents of the corpus, up to 20 MB of text, as plain text.
  /usr/bin/python3 -c '
import json, sys
left = 20_000_000
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as dst:
    for line in src:
        text = json.loads(line)["text"]
        dst.write(text)
        left -= len(text.encode())
        if left <= 0:
            break
' "$corpus" "$slice"
  "${bench[@]}" /usr/bin/time -f "tokenizer train: %e s, peak RSS %M KiB" \
    "$bin" tokenizer train --input "$slice" --vocab-size 32768 --output "$tok"
fi
echo "corpus: $corpus ($(wc -l <"$corpus") documents, $(du -m "$corpus" | cut -f1) MiB of JSONL)"
echo "tokenizer: $tok"

declare -A mbps cpu rss
for run in 1 2 3; do
  for w in 1 2; do
    log=$dir/run_w${w}_$run.log
    "${bench[@]}" /usr/bin/time -v "$bin" preprocess --input "$corpus" --json-key text \
      --tokenizer "$tok" --workers "$w" --output-prefix "$dir/out_w$w" >"$log" 2>&1
    m=$(sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p' "$log" | tail -1)
    r=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$log")
    c=$(awk '/^preprocess:/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "bytes,") b = $i }
             /User time|System time/ { t += $NF }
             END { printf "%.1f", b / 1e6 / t }' "$log")
    mbps[$w]+="$m "
    cpu[$w]+="$c "
    rss[$w]+="$r "
    echo "workers $w run $run: $m MB/s, $c MB per CPU-second, peak RSS $((r / 1024)) MiB"
    grep '^preprocess:' "$log"
  done
done

median() { tr ' ' '\n' | grep . | sort -g | sed -n 2p; }
echo
echo "| workers | MB/s (3 runs) | median MB/s | median MB/s / workers | MB per CPU-second (median) | peak RSS (median) |"
echo "|---|---|---|---|---|---|"
for w in 1 2; do
  m=$(echo "${mbps[$w]}" | median)
  r=$(echo "${rss[$w]}" | median)
  per=$(awk -v m="$m" -v w="$w" 'BEGIN { printf "%.1f", m / w }')
  echo "| $w | ${mbps[$w]% } | $m | $per | $(echo "${cpu[$w]}" | median) | $((r / 1024)) MiB |"
done
echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); the machine is shared)"

cmp -s "$dir/out_w1.bin" "$dir/out_w2.bin" && cmp -s "$dir/out_w1.idx" "$dir/out_w2.idx" ||
  { echo "$0: --workers 1 and 2 wrote different datasets" >&2; exit 1; }
echo
echo "--workers 1 and 2 wrote identical datasets; it reads back (counts, then document 0's start):"
doc0=$("$bin" data inspect "$dir/out_w1" --doc 0 --decode --tokenizer "$tok")
echo "${doc0:0:400}"
