#!/usr/bin/env bash
# Proves the GPU kit on this machine, without a GPU, before any GPU time is spent: unpacks it into a
# bare Debian 12 root (scripts/fresh_root.sh: none of the project's packages, no Open MPI, no
# /usr/local/cuda), lays CUDA's libraries out there as the GPU image has them (the pip nvidia-*
# wheels of a Python venv under /opt), cuts the network and runs `device_check.sh --smoke` inside
# (bench/gpu/smoke_stages.sh says what it checks). Prints its summary; exit 0 only when every
# stage passed.
#   sudo bash scripts/gpu_kit/check_kit.sh [--kit gpu_kit/kit.tar.xz]   (results to $OUT or gpu_results/)
# Needs root (chroot, mount, unshare), the kit (scripts/gpu_kit/make_kit.sh) and the CUDA toolkit's
# libraries on this machine (to stand in for the image's). The bare root has neither xz nor Python
# (the GPU image has Python, whose tarfile reads xz), so the kit goes in decompressed, as a .tar.
set -uo pipefail
cd "$(dirname "$0")/../.."
kit=gpu_kit/kit.tar.xz
[ "${1:-}" = --kit ] && kit=$2
[ "$(id -u)" = 0 ] || { echo "check_kit: needs root (chroot, mount, unshare)" >&2; exit 2; }
[ -f "$kit" ] || { echo "check_kit: no kit at $kit: run bash scripts/gpu_kit/make_kit.sh first" >&2; exit 2; }
cuda_lib=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libcudart.so.13 /{print $NF; exit}')")" 2>/dev/null)
[ -n "$cuda_lib" ] && [ -e "$cuda_lib/libcublasLt.so.13" ] ||
  { echo "check_kit: CUDA's libraries not found on this machine (libcudart.so.13 beside libcublasLt.so.13)" >&2; exit 2; }

# shellcheck source=scripts/fresh_root.sh
. scripts/fresh_root.sh
work=$(mktemp -d /var/tmp/megatrain-kit-check.XXXXXX)
root=$work/root
trap 'fresh_root_remove "$work" "$root"' EXIT
trap 'exit 130' INT TERM
start=$(date +%s)

fresh_root_make "$root" "$work/bootstrap.log" || { cat "$work/bootstrap.log"; exit 1; }
fresh_root_copy_checkout "$root" root/megatrain
mkdir -p "$root/root/megatrain/gpu_kit" "$root/root/out"
xz -dc "$kit" >"$root/root/megatrain/gpu_kit/kit.tar"

# CUDA's libraries where the image's PyTorch venv has them: nvidia/cu13/lib (runtime, cuBLAS,
# NVRTC), nvidia/cudnn/lib, nvidia/nccl/lib. Hard links where the file system allows (1.4 GB).
site=$root/opt/torch/.venv/lib/python3.12/site-packages/nvidia
lay() {
  local dir=$site/$1/lib f g
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    for g in "$cuda_lib"/$f; do [ -e "$g" ] && { ln "$(readlink -f "$g")" "$dir/$(basename "$g")" 2>/dev/null ||
      cp -L "$g" "$dir/$(basename "$g")"; }; done
  done
}
lay cu13 'libcudart.so.13' 'libcublas.so.13' 'libcublasLt.so.13' 'libnvrtc.so.13' 'libnvrtc-builtins.so.13*'
lay cudnn 'libcudnn*.so.9'
lay nccl 'libnccl.so.2'
[ ! -e "$root/usr/local/cuda" ] || { echo "check_kit: the bare root has /usr/local/cuda" >&2; exit 1; }

fresh_root_mount "$root"
echo "check_kit: bare root ready in $(($(date +%s) - start))s; running device_check.sh --smoke without a network"
# A new network namespace with only its loopback up: nothing outside can be reached.
unshare -n bash -c "ip link set lo up && chroot '$root' /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin OUT=/root/out \
  bash -c 'cd /root/megatrain && bash bench/gpu/device_check.sh --smoke --kit gpu_kit/kit.tar'"
rc=$?
results=${OUT:-gpu_results}
mkdir -p "$results"
cp "$root"/root/out/* "$results/" 2>/dev/null
echo "check_kit: exit $rc after $(($(date +%s) - start))s (results in $results/)"
exit "$rc"
