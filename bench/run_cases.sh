# The part of the end-to-end benchmarks (bench/dp_overlap.sh, bench/tp.sh, bench/precision.sh)
# that runs them: the dataset, made once when missing (the bytes tokenizer over Debian's /usr/share/common-licenses,
# 0.3 M tokens; GPT-2's vocabulary of 50257 covers the 257 byte ids), then every case REPS times,
# repetitions interleaved (rep 1 of every case, then rep 2, ...) so that load from other processes
# falls on all cases alike. Each run: configs/gpt2_124m.toml at seq 1024, micro-batch 1, global
# batch $global_batch, log.interval = 1, with DIR/CASE_rREP.log and .jsonl; through mpirun (also at
# one rank) with OMP_NUM_THREADS=1 per rank and `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`
# (bench/RESULTS.md). Sourced by a script that has set bin, dir, reps, steps, warmup, cases and
# global_batch and defined `case_args CASE` (prints the rank count, then train arguments).
# A script may instead set base_args (an array: --config FILE and --set overrides for its own model
# and data); then the config, seq 1024, micro-batch 1, global_batch and the dataset above are not used.
# SKIP_RUNS=1 only checks the arguments.
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ "$steps" -gt "$warmup" ] || { echo "$0: STEPS=$steps must exceed WARMUP=$warmup" >&2; exit 2; }
mkdir -p "$dir"
data=
if [ -z "${base_args+x}" ]; then
  data=$dir/licenses_bytes
  base_args=(--config configs/gpt2_124m.toml --set data.train="\"$data\"" --set train.seq_len=1024
             --set train.micro_batch_size=1 --set train.global_batch_size="$global_batch")
fi
bench=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

if [ "${SKIP_RUNS:-0}" != 1 ]; then
  if [ -n "$data" ] && [ ! -s "$data.idx" ]; then
    "${bench[@]}" "$bin" preprocess --input /usr/share/common-licenses/* --tokenizer bytes --output-prefix "$data"
  fi
  for rep in $(seq 1 "$reps"); do
    for c in $cases; do
      read -r -a a <<< "$(case_args "$c")"
      np=${a[0]}
      run=$dir/${c}_r$rep
      echo "== $c rep $rep ($np rank(s)) $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
      rm -f "$run.jsonl"
      "${bench[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -np "$np" -x OMP_NUM_THREADS=1 \
        "$bin" train "${base_args[@]}" --set train.steps="$steps" --set train.eval_interval=0 \
        --set optimizer.warmup_steps=1 --set checkpoint.save_interval=0 --set checkpoint.load='""' \
        --set log.interval=1 --set log.metrics_file="\"$run.jsonl\"" "${a[@]:1}" > "$run.log" 2>&1 ||
        { echo "$0: run $c rep $rep failed; see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
      grep -E '^step +[0-9]+/' "$run.log" | tail -1
    done
  done
fi
