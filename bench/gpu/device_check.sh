#!/usr/bin/env bash
# The one command to run on a machine with a GPU that cannot build megatrain (issue: GPU kit): it
# unpacks the kit (gpu_kit/kit.tar.xz, made on any CPU machine by scripts/gpu_kit/make_kit.sh and
# carried beside the repository) and runs, in priority order, each stage in its own time box under
# one deadline, writing each stage's result the moment it finishes:
#   1 env         the GPU, driver, toolkit, glibc, CPU flags, where each CUDA library came from
#   2 ops         every op, MoE move, whole-model stage, AdamW and cuDNN attention against the CPU
#                 backend, and the production shapes (test_device_gpu); failures rerun under
#                 CUDA_LAUNCH_BLOCKING=1 to pin the kernel
#   3 e2e         the megatrain binary on one GPU against the CPU binary: fp32 (1e-5), bf16 (1e-3),
#                 cuDNN against flash attention, Llama, MoE, a GPT-2 124M-shaped run; NCCL on a
#                 one-rank communicator
#   4 kernels     kernel times against cuBLAS (cublasGemmEx) and cuDNN, 124M and 1.3B shapes
#   5 throughput  bf16 tokens/s and MFU of configs/gpt2_124m.toml and configs/llama_1b3.toml, against
#                 the datasheet peak and against the cuBLAS bf16 rate stage 4 measured
#   6 memcheck    compute-sanitizer memcheck over the op suite, with the time that is left
# Usage (from the repository root):
#   bash bench/gpu/device_check.sh [--kit PATH] [--deadline S]   on the GPU machine
#   bash bench/gpu/device_check.sh --build build    on a GPU machine that built megatrain itself
#                                                   (bash scripts/setup.sh there): no kit needed
#   bash bench/gpu/device_check.sh --dry-run    every stage here, the device replaced by the CPU
#                                               or the host emulation (the build machine's build/)
#   bash bench/gpu/device_check.sh --smoke      the kit on a machine without a GPU or CUDA toolkit
#                                               (scripts/gpu_kit/check_kit.sh runs it in a bare root)
# Results go to $OUT when set (the GPU machine returns only that folder), else gpu_results/: at
# most 8 files — summary.txt (one row per stage, written as each ends), env.txt, parity.xml,
# parity.log, e2e.log, kernels.txt, throughput.tsv, logs.tar.gz. No `set -e`: one failing stage
# never stops the next; a trap packs whatever exists if the run is interrupted.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
mode=device
kit=gpu_kit/kit.tar.xz
build_dir=""
deadline=${DEADLINE:-390}
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) mode=smoke ;;
    --dry-run) mode=dry-run ;;
    --kit) kit=$2; shift ;;
    --build) build_dir=$2; shift ;;
    --deadline) deadline=$2; shift ;;
    *) echo "usage: $0 [--smoke | --dry-run] [--kit PATH | --build DIR] [--deadline SECONDS]" >&2; exit 2 ;;
  esac
  shift
done
started=$(date +%s)
export GTEST_COLOR=no  # mpirun gives its ranks a terminal; the logs are read by pattern
deadline_at=$((started + deadline))
res=${OUT:-$repo/gpu_results}
mkdir -p "$res"
logs=$(mktemp -d "${TMPDIR:-/tmp}/device-check-logs.XXXXXX")  # packed into logs.tar.gz
scratch=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")      # data, a build laid out as a kit
# shellcheck source=bench/gpu/check_lib.sh
. bench/gpu/check_lib.sh
device_name=""

finish() {
  trap - EXIT INT TERM
  record total "$( [ -n "${failed_any:-}" ] && echo FAIL || echo DONE)" $(($(date +%s) - started)) \
    "deadline ${deadline}s; logs in logs.tar.gz"
  tar -C "$logs" -czf "$res/logs.tar.gz" . 2>/dev/null
  rm -rf "$logs" "$scratch"
  cat "$res/summary.txt"
}
trap finish EXIT
trap 'failed_any=1; stop_boxed; exit 130' INT TERM
fail() { failed_any=1; }

# 1. The machine and the kit.
t0=$(date +%s)
if [ -n "$build_dir" ]; then open_build "$build_dir"; else open_kit "$kit"; fi >"$logs/kit.log" 2>&1
if [ -z "${MEGATRAIN_KIT:-}" ]; then
  fail
  record kit FAIL $(($(date +%s) - t0)) "$(tail -1 "$logs/kit.log")"
  exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$gpus" -gt 0 ] && device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
{
  echo "== kit"; head -12 "$MEGATRAIN_KIT/MANIFEST"
  echo "== GPU"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  nvidia-smi 2>/dev/null | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/driver supports \1/p' | head -1
  echo "== toolkit"; (nvcc --version 2>&1 || /usr/local/cuda/bin/nvcc --version 2>&1) | tail -2
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none)"
  echo "== host"; ldd --version 2>&1 | head -1; uname -srm; echo "cores $(nproc)"
  echo "cpu $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
  echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' | paste -sd' ' -)"
  grep -E "^(MemTotal|MemAvailable)" /proc/meminfo; df -h . /tmp 2>/dev/null
  echo "== CUDA libraries the kit's binaries load"; kit-env kit_cuda_report
  echo "== pip nvidia-* packages"
  for py in /opt/*/.venv/bin/python3 python3; do
    command -v "$py" >/dev/null && "$py" -m pip list 2>/dev/null | grep -iE '^(nvidia|torch)' && break
  done
} >"$res/env.txt" 2>&1
for f in "$MEGATRAIN_KIT"/libexec/*; do echo "== $f"; kit-env ldd "$f"; done >"$logs/ldd.txt" 2>&1
unfound=$(sed -n '/^== CUDA libraries/,/^==/p' "$res/env.txt" | grep -c 'not found')
record env PASS $(($(date +%s) - t0)) "${device_name:-no GPU} ($gpus GPU(s)); $unfound of 6 CUDA libraries not found"

if [ "$mode" = smoke ]; then
  # shellcheck source=bench/gpu/smoke_stages.sh
  . bench/gpu/smoke_stages.sh
  exit $([ -n "${failed_any:-}" ] && echo 1 || echo 0)
fi

build=${BUILD_DIR:-$repo/build}
# 2. Every op against the CPU backend. Dry run: the same suites on the host emulation.
t0=$(date +%s)
if [ "$mode" = device ]; then
  run_boxed 110 "$res/parity.log" test_device_gpu --gtest_output="xml:$res/parity.xml"
  rc=$?
  failed=$(gtest_failed "$res/parity.log")
  if [ -n "$failed" ] && [ "$rc" != 124 ]; then
    echo "== rerun of the failures with CUDA_LAUNCH_BLOCKING=1" >>"$res/parity.log"
    CUDA_LAUNCH_BLOCKING=1 run_boxed 60 "$res/parity.log" test_device_gpu --gtest_filter="$failed"
  fi
else
  run_boxed 110 "$res/parity.log" "$build/tests/simt/test_ops_parity" --gtest_output="xml:$res/parity.xml"
  rc=$?
  run_boxed 60 "$res/parity.log" "$build/tests/simt/test_model_device" || rc=$?
fi
[ "$rc" = 0 ] || fail
record ops "$(status_of "$rc")" $(($(date +%s) - t0)) "$(gtest_counts "$res/parity.log")${failed:+; failed: $failed}"

# 3. End to end on one GPU against the CPU binary; NCCL on a one-rank communicator.
t0=$(date +%s)
e2e_filter='DeviceE2E.OneRank*:DeviceE2E.Llama*:DeviceE2E.Moe*:DeviceE2E.ProductionShape*:DeviceE2E.Settings*'
if [ "$mode" = device ]; then
  MEGATRAIN_DEVICE_BIN=$MEGATRAIN_KIT/bin/megatrain MEGATRAIN_TEST_GPUS=$gpus OMP_NUM_THREADS=$(nproc) \
    run_boxed 150 "$res/e2e.log" test_device_e2e --gtest_filter="$e2e_filter"
else
  run_boxed 150 "$res/e2e.log" test_device_e2e --gtest_filter="DeviceE2E.OneRank*:DeviceE2E.Settings*"
fi
rc=$?
[ "$rc" = 0 ] || fail
record e2e "$(status_of "$rc")" $(($(date +%s) - t0)) "$(gtest_counts "$res/e2e.log")"
t0=$(date +%s)
run_boxed 40 "$logs/nccl.log" mpirun -np 1 test_nccl_cuda
rc=$?
[ "$mode" = device ] && [ "$rc" != 0 ] && fail
[ "$mode" != device ] && [ "$rc" = 77 ] && rc=0  # no device here: the skip is the expected result
cat "$logs/nccl.log" >>"$res/e2e.log"
record "nccl (1 rank)" "$(status_of "$rc")" $(($(date +%s) - t0)) "$(gtest_counts "$logs/nccl.log")"

# 4. Kernel times against cuBLAS and cuDNN. Dry run: the CPU at the tiny shapes.
t0=$(date +%s)
: >"$res/kernels.txt"
if [ "$mode" = device ]; then
  run_boxed 45 "$res/kernels.txt" kernel_times --device cuda --precision bf16 --shape gpt2_124m; rc=$?
  run_boxed 45 "$res/kernels.txt" kernel_times --device cuda --precision bf16 --shape llama_1b3 || rc=$?
else
  run_boxed 45 "$res/kernels.txt" kernel_times --device cpu --precision bf16 --shape tiny --iters 5; rc=$?
fi
[ "$rc" = 0 ] || fail
cublas_rate=$(sed -n 's/^cuBLAS bf16 GEMM best: \([0-9.]*\) TFLOP\/s.*/\1/p' "$res/kernels.txt" | sort -g | tail -1)
record kernels "$(status_of "$rc")" $(($(date +%s) - t0)) \
  "$(grep -cE ' cuBLAS +[0-9]' "$res/kernels.txt") GEMMs timed against cuBLAS; best cuBLAS bf16 rate ${cublas_rate:-?} TFLOP/s; $(grep -c 'WARNING' "$res/kernels.txt") WARNING lines"

# 5. bf16 training throughput and MFU. Dry run: the CPU, a few short steps of smaller models.
# shellcheck source=bench/gpu/throughput_stage.sh
. bench/gpu/throughput_stage.sh

# 6. compute-sanitizer memcheck over the op suite, with what is left of the deadline.
t0=$(date +%s)
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ "$mode" = device ] && [ -n "$sanitizer" ]; then
  run_boxed 120 "$logs/memcheck.log" kit-env "$sanitizer" --tool memcheck --error-exitcode 3 --target-processes all \
    "$MEGATRAIN_KIT/libexec/test_device_gpu" --gtest_filter='OpsParity.*'
  rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 124 ] || fail
  record memcheck "$(status_of "$rc")" $(($(date +%s) - t0)) \
    "$(grep -m1 -o 'ERROR SUMMARY: [0-9]* errors' "$logs/memcheck.log" || echo 'no summary'); $(gtest_counts "$logs/memcheck.log")"
else
  record memcheck SKIP 0 "$([ "$mode" = device ] && echo 'no compute-sanitizer on this machine' || echo 'needs a GPU')"
fi
