#!/usr/bin/env bash
# The GPU kit's smoke check (scripts/gpu_kit/check_kit.sh) on a kit packed from this build: every
# binary and plugin resolves its libraries in a bare Debian root with CUDA laid out as the GPU image
# has it, Open MPI runs relocated with 1 and 2 ranks, the GPU tests skip and train.device = "cuda"
# is refused. The kit is this machine's build (its own CPU flags), not the portable one make_kit.sh
# builds: what is checked here is the kit's packing and relocation, which are the same.
# Skips (exit 77) without root, without the cached bare root (sudo bash scripts/check_fresh_setup.sh
# --first, or any earlier check_kit.sh run, makes it) or without the CUDA backend in the build.
#   bash tests/scripts/test_gpu_kit_smoke.sh BUILD_DIR     (ctest gpu_kit_smoke, label e2e)
set -uo pipefail
build=$(cd "${1:?usage: test_gpu_kit_smoke.sh BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../.."
cache=${FRESH_ROOT_CACHE:-/var/cache/megatrain/bookworm-minbase.tar}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (chroot, mount, unshare)"
[ -f "$cache" ] || skip "no cached bare Debian root at $cache (sudo bash scripts/check_fresh_setup.sh --first makes it)"
grep -q '^MEGATRAIN_CUDA:BOOL=ON' "$build/CMakeCache.txt" || skip "the build has no CUDA backend"
command -v unshare >/dev/null && command -v ip >/dev/null || skip "needs unshare and ip (util-linux, iproute2)"
tmp=$(mktemp -d /var/tmp/megatrain-kit-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
SKIP_BUILD=1 KIT_BUILD_DIR=$build KIT_STAGE=$tmp/kit KIT_OUT=$tmp bash scripts/gpu_kit/make_kit.sh ||
  { echo "FAIL: make_kit.sh"; exit 1; }
OUT=$tmp/results bash scripts/gpu_kit/check_kit.sh --kit "$tmp/kit.tar.xz"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: check_kit.sh exit $rc"; exit 1; }
summary=$tmp/results/summary.txt
for stage in ldd config preprocess "mpi 1 rank" "mpi 2 ranks" "no mpirun" kernels test_device_gpu test_nccl_cuda \
  "cuda refused"; do
  grep -q "^$stage  *PASS " "$summary" || { echo "FAIL: stage '$stage' did not pass"; cat "$summary"; exit 1; }
done
! grep -q ' FAIL ' "$summary" || { echo "FAIL: a stage failed"; cat "$summary"; exit 1; }
echo "PASS: the kit's smoke check (10 stages)"
