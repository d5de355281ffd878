# Stage 5 of bench/gpu/device_check.sh (sourced): bf16 training throughput of GPT-2 124M
# (micro-batch 16 × 1024) and the Llama-style 1.3B (micro-batch 4 × 2048, no recompute) on one GPU,
# 10 steps each with the first 2 left out, a second repetition where the deadline allows. MFU
# against the card's datasheet bf16 dense peak (log.peak_tflops) and against the cuBLAS bf16 GEMM
# rate stage 4 measured on this card ($cublas_rate). Dry run: the CPU, 2-layer models, short steps.
# Writes throughput.tsv (one row per run) and one summary row.
t0=$(date +%s)
tsv=$res/throughput.tsv
printf 'model\trep\tsteps\tstep_ms\ttokens_per_s\tmfu_vs_peak\tmfu_vs_cublas\tdevice_peak_gib\tattention\n' >"$tsv"
case "$device_name" in
  *H200*|*H100*SXM*|*"H100 80GB HBM3"*) peak=989 ;;
  *H100*) peak=756 ;;
  *A100*) peak=312 ;;
  *) peak=${PEAK_TFLOPS:-989} ;;
esac
# The corpus: the kit's fortune files as bytes (the GPU image has no Debian corpus).
data=$scratch/fortunes
run_boxed 30 "$logs/throughput_data.log" megatrain preprocess --tokenizer bytes --doc-separator % \
  --input "$MEGATRAIN_KIT/data/science" "$MEGATRAIN_KIT/data/wisdom" --output-prefix "$data"
common=(--set "data.train=\"$data\"" --set train.precision='"bf16"' --set train.eval_interval=0
        --set optimizer.warmup_steps=1 --set checkpoint.save_interval=0 --set 'checkpoint.load=""'
        --set log.interval=1)
if [ "$mode" = device ]; then
  common+=(--set train.device='"cuda"' --set train.steps=10 --set log.peak_tflops="$peak")
  sizes=("gpt2_124m:--set train.micro_batch_size=16 --set train.global_batch_size=16"
         "llama_1b3:--set train.micro_batch_size=4 --set train.global_batch_size=4 --set train.recompute=\"none\"")
  warm=2 threads=8 unit=" TFLOP/s"
else
  common+=(--set train.steps=4 --set model.n_layers=2 --set train.seq_len=128 --set 'log.peak_tflops="auto"')
  peak="measured at start-up"
  sizes=("gpt2_124m:--set train.micro_batch_size=1 --set train.global_batch_size=1"
         "llama_1b3:--set train.micro_batch_size=1 --set train.global_batch_size=1 --set model.d_model=512 --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=1024")
  warm=1 threads=2 unit=""
fi
rows=0 rc_all=0 figures=""
for rep in 1 2; do
  for entry in "${sizes[@]}"; do
    model=${entry%%:*}
    read -ra extra <<<"${entry#*:}"
    # A second repetition only with a minute left for each run of it.
    [ "$rep" = 2 ] && [ "$(left)" -lt 140 ] && continue
    run=$logs/${model}_r$rep
    OMP_NUM_THREADS=$threads run_boxed 100 "$run.log" mpirun -np 1 -x OMP_NUM_THREADS megatrain train \
      --config "configs/$model.toml" "${common[@]}" "${extra[@]}" --set log.metrics_file="\"$run.jsonl\""
    rc=$?
    if [ "$rc" != 0 ] || [ ! -s "$run.jsonl" ]; then
      rc_all=$rc; [ "$rc_all" = 0 ] && rc_all=1
      figures+="$model r$rep $(status_of "$rc"); "
      continue
    fi
    ms=$(metrics_median "$run.jsonl" step_time_ms "$warm")
    tps=$(metrics_median "$run.jsonl" tokens_per_s "$warm")
    mfu=$(metrics_median "$run.jsonl" mfu "$warm")
    gib=$(grep '"step_time_ms"' "$run.jsonl" | tail -1 | json_field device_peak | awk '{printf "%.1f", $1 / 2^30}')
    mfu_cublas=$(awk -v m="$mfu" -v p="$peak" -v c="${cublas_rate:-}" 'BEGIN {if (c > 0) printf "%.3f", m * p / c; else print "-"}')
    attention=$(grep -v 'WARNING' "$run.log" | grep -o 'attention: [^;]*' | head -1)
    warnings=$(grep -c 'WARNING' "$run.log")
    [ "$warnings" = 0 ] || attention+=" ($warnings WARNING lines: $(grep -m1 -o 'WARNING: [^:]*' "$run.log"))"
    printf '%s\t%s\t%s\t%.1f\t%.0f\t%.3f\t%s\t%s\t%s\n' "$model" "$rep" "$(grep -c '"step_time_ms"' "$run.jsonl")" \
      "$ms" "$tps" "$mfu" "$mfu_cublas" "$gib" "$attention" >>"$tsv"
    rows=$((rows + 1))
    [ "$rep" = 1 ] && figures+="$model $(printf '%.0f' "$tps") tok/s MFU $(awk -v m="$mfu" 'BEGIN {printf "%.1f", 100 * m}')% (vs cuBLAS ${mfu_cublas}); "
  done
done
[ "$rc_all" = 0 ] || fail
record throughput "$(status_of "$rc_all")" $(($(date +%s) - t0)) "${figures}peak ${peak}${unit}; $rows runs"
