#!/usr/bin/env bash
# The GPU benchmark and check, on a machine with NVIDIA GPUs and the CUDA toolkit (issue: CUDA
# backend). From the repository root, after `bash scripts/setup.sh` (which builds the CUDA backend
# wherever the toolkit is installed):
#   bash bench/gpu/run.sh [DIR]                 (DIR default runs/bench_gpu)
# It prints, in order:
#   1. the device, driver and CUDA versions (bench/RESULTS.md quotes them with the figures);
#   2. `ctest -L cuda`: every op of the CUDA backend, whole-model stages and AdamW against the CPU
#      backend (device_parity_cuda), the end-to-end device runs against the CPU binary
#      (device_e2e_cuda: layouts needing more ranks than GPUs skip) and the NCCL communicator
#      (nccl_cuda_np2, 2 GPUs);
#   3. per-kernel times against cuBLAS, and against a device-to-device copy of the same bytes for
#      the memory-bound kernels (build/bench/kernel_times);
#   4. training throughput in bf16: GPT-2 124M (configs/gpt2_124m.toml) and a Llama-style 1.3B
#      (configs/llama_1b3.toml), tokens/s and MFU against the card's datasheet bf16 dense peak.
# Environment: GPUS (ranks for step 4, default 1, one GPU each), STEPS (12; the first WARMUP=2 are
# discarded), REPS (3), PEAK_TFLOPS (default from the GPU's name: H100/H200 SXM 989, H100 PCIe 756,
# A100 312), MB_124M (micro-batch, 16), MB_1B3 (4), RECOMPUTE_1B3 ("none"; "selective" or "full"
# where memory is short), SKIP_TESTS=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-runs/bench_gpu}
bin=build/megatrain
mkdir -p "$dir"
command -v nvidia-smi >/dev/null || { echo "$0: nvidia-smi not found: this needs a machine with an NVIDIA GPU" >&2; exit 2; }
[ -x "$bin" ] || { echo "$0: $bin not found; run bash scripts/setup.sh first" >&2; exit 2; }
grep -q '^MEGATRAIN_CUDA:BOOL=ON' build/CMakeCache.txt ||
  { echo "$0: build/ has no CUDA backend (MEGATRAIN_CUDA is OFF): install the CUDA toolkit and rerun scripts/setup.sh" >&2; exit 2; }

echo "== 1. device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv
nvidia-smi | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/driver supports \1/p' | head -1
nvcc --version | tail -2 | head -1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
peak=${PEAK_TFLOPS:-}
if [ -z "$peak" ]; then
  case "$name" in
    *H200*|*H100*SXM*|*H100\ 80GB\ HBM3*) peak=989 ;;
    *H100*PCIe*|*H100*) peak=756 ;;
    *A100*) peak=312 ;;
    *) echo "$0: no datasheet bf16 peak known for '$name'; set PEAK_TFLOPS" >&2; exit 2 ;;
  esac
fi
echo "MFU peak: $peak TFLOP/s bf16 dense per GPU ($name)"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== 2. ctest -L cuda"
  ctest --test-dir build -L cuda --output-on-failure || echo "$0: some cuda-labelled tests failed (above)"
fi

echo "== 3. kernels"
build/bench/kernel_times --device cuda --shape gpt2_124m
build/bench/kernel_times --device cuda --shape llama_1b3

echo "== 4. training throughput, bf16"
gpus=${GPUS:-1}
steps=${STEPS:-12}
warmup=${WARMUP:-2}
reps=${REPS:-3}
data=$dir/licenses_bytes
[ -s "$data.idx" ] || "$bin" preprocess --input /usr/share/common-licenses/* --tokenizer bytes --output-prefix "$data"
common=(--set data.train="\"$data\"" --set train.device='"cuda"' --set train.precision='"bf16"'
        --set log.peak_tflops="$peak" --set train.steps="$steps" --set train.eval_interval=0
        --set optimizer.warmup_steps=1 --set checkpoint.save_interval=0 --set checkpoint.load='""' --set log.interval=1)
mb124=${MB_124M:-16}
mb1b3=${MB_1B3:-4}
for rep in $(seq 1 "$reps"); do
  for model in gpt2_124m llama_1b3; do
    if [ "$model" = gpt2_124m ]; then
      extra=(--set train.micro_batch_size="$mb124" --set train.global_batch_size=$((mb124 * gpus)))
    else
      extra=(--set train.micro_batch_size="$mb1b3" --set train.global_batch_size=$((mb1b3 * gpus))
             --set train.recompute="\"${RECOMPUTE_1B3:-none}\"")
    fi
    run=$dir/${model}_r$rep
    echo "-- $model rep $rep ($gpus GPU(s))"
    rm -f "$run.jsonl"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$gpus" -x OMP_NUM_THREADS=4 \
      "$bin" train --config "configs/$model.toml" "${common[@]}" "${extra[@]}" \
      --set log.metrics_file="\"$run.jsonl\"" > "$run.log" 2>&1 ||
      { echo "$0: $model failed; see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
    grep -E '^step +[0-9]+/' "$run.log" | tail -1
  done
done

/usr/bin/python3 - "$dir" "$warmup" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm = sys.argv[1], int(sys.argv[2])
rows = load_runs(d, warm, ("step_time_ms", "tokens_per_s", "mfu"))
print(f"\nmedian over runs of each run's mean over steps > {warm}")
print(f"{'model':<10} {'runs':>4} {'step ms':>9} {'tokens/s':>10} {'MFU':>6} {'device peak GiB':>16}")
for model in ("gpt2_124m", "llama_1b3"):
    rs = rows.get(model, [])
    if not rs:
        continue
    med = lambda k: statistics.median(r[k] for r in rs)
    peak = max(r["memory"].get("device_peak", 0) for r in rs) / (1 << 30)
    print(f"{model:<10} {len(rs):>4} {med('step_time_ms'):>9.1f} {med('tokens_per_s'):>10.0f} "
          f"{100 * med('mfu'):>5.1f}% {peak:>16.1f}")
PY
