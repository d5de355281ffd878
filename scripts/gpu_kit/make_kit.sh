#!/usr/bin/env bash
# Builds the GPU kit on a CPU machine (no GPU needed): a portable build of the binaries the device
# check runs, with every shared library they need that a GPU machine's image may lack, a relocatable
# Open MPI/PMIx runtime and the data the checks read, packed as one archive that travels beside the
# repository to a machine that cannot build (bench/gpu/device_check.sh unpacks and runs it there).
#   bash scripts/gpu_kit/make_kit.sh            build into build-gpukit/, pack gpu_kit/kit.tar.xz
#   SKIP_BUILD=1 bash scripts/gpu_kit/make_kit.sh   pack what build-gpukit/ already holds
#   SKIP_BUILD=1 KIT_BUILD_DIR=build bash …         a kit of the regular build (this machine's CPU
#                                                  only: for checking the kit itself)
# Needs what scripts/setup.sh installs (and the CUDA toolkit in /usr/local/cuda or on PATH).
#
# The build: -march=x86-64-v3 instead of the build machine's own CPU (the GPU host's CPU is unknown:
# an AVX-512 instruction there could be SIGILL), sm_90 only (H100/H200) with -lineinfo for
# compute-sanitizer and ncu, no build-tree RPATH (the kit's LD_LIBRARY_PATH decides), and only the
# targets the check runs. The libraries are chosen by rule from ldd, not by a list: everything the
# binaries and the kept Open MPI/PMIx plugins load, except the C library family and the C++ runtime
# (every image has them, newer) and CUDA's libraries (1.4 GB: the kit finds the image's, see
# scripts/gpu_kit/env.sh; it carries only a small CUDA runtime as a fallback). Plugins for network
# fabrics (UCX, OFI, verbs, PSM) are left out: the check runs on one host.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
build=${KIT_BUILD_DIR:-build-gpukit}
stage=${KIT_STAGE:-$build/kit}  # KIT_STAGE, KIT_OUT: elsewhere (tests/scripts/test_gpu_kit.sh)
out=${KIT_OUT:-gpu_kit}
start=$(date +%s)

nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { echo "make_kit: no nvcc at /usr/local/cuda/bin or on PATH: install the CUDA toolkit" >&2; exit 2; }
cuda_root=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
# ldd below resolves the CUDA libraries too (to leave them out by name, not miss them).
export LD_LIBRARY_PATH=$cuda_root/lib64:$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
frontend=$repo/build/_deps/cudnn_frontend-1.32.0
[ -f "$frontend/include/cudnn_frontend.h" ] ||
  { echo "make_kit: cuDNN frontend headers missing at $frontend: run bash scripts/setup.sh first" >&2; exit 2; }

# shellcheck source=scripts/gpu_kit/layout.sh
. scripts/gpu_kit/layout.sh
targets=("${kit_targets[@]}")
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== configure $build (x86-64-v3, sm_90, -lineinfo)"
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGATRAIN_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_C_FLAGS=-march=x86-64-v3 \
    -DMEGATRAIN_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DMEGATRAIN_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_FLAGS=-lineinfo -DCMAKE_SKIP_BUILD_RPATH=ON -DCUDNN_FRONTEND_ROOT="$frontend" \
    -DMEGATRAIN_TESTS=ON -DMEGATRAIN_BENCH=ON ${MEGATRAIN_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 ||
    { tail -30 "$build/configure.log"; exit 1; }
  grep -q '^MEGATRAIN_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "make_kit: CUDA backend not configured" >&2; exit 1; }
  echo "== build ${targets[*]}"
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
built=$(date +%s)

echo "== collect the kit in $stage"
rm -rf "$stage"
mkdir -p "$stage"/{libexec,lib,cuda-fallback,data,ompi}
for t in "${targets[@]}"; do
  f=$(find "$build" -maxdepth 4 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "make_kit: $t not built in $build" >&2; exit 1; }
  strip --strip-unneeded -o "$stage/libexec/$t" "$f"
done

# Open MPI's run-time tree at Debian's layout below a prefix (env.sh points OPAL_PREFIX at it).
ompi_pkglib=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
ompi_sysconf=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
pmix_plugins=$(sed -n 's/^mca_base_component_path *= *//p' /usr/lib/x86_64-linux-gnu/pmix2/share/pmix-mca-params.conf)
pmix_root=$(dirname "$(dirname "$pmix_plugins")")
rel_pkglib=${ompi_pkglib#"$ompi_prefix"/}
mkdir -p "$stage/ompi/usr/bin" "$stage/ompi/usr/$rel_pkglib" "$stage/ompi/usr/share" "$stage/ompi/etc" \
  "$stage/ompi/pmix/lib/pmix" "$stage/ompi/pmix/share"
for exe in orterun orted; do cp -L "$ompi_prefix/bin/$exe" "$stage/ompi/usr/bin/$exe"; done
cp -rL "$ompi_pkgdata" "$stage/ompi/usr/share/"
cp -rL "$ompi_sysconf" "$stage/ompi/etc/"
cp -rL "$pmix_root/share/." "$stage/ompi/pmix/share/"
fabric='libucp|libucs|libuct|libfabric|libibverbs|librdmacm|libpsm|libpsm2|libefa'
keep_plugin() { ! ldd "$1" 2>/dev/null | grep -Eq "$fabric|not found"; }
for p in "$ompi_pkglib"/*.so; do keep_plugin "$p" && cp -L "$p" "$stage/ompi/usr/$rel_pkglib/"; done
for p in "$pmix_plugins"/*.so; do keep_plugin "$p" && cp -L "$p" "$stage/ompi/pmix/lib/pmix/"; done

# The shared libraries, by rule from ldd over every ELF file of the kit.
carried() {
  case "$1" in
    ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|libmvec.so*) return 1 ;;
    libanl.so*|libnsl.so*|libBrokenLocale.so*|libstdc++.so*|libgcc_s.so*|linux-vdso.so*) return 1 ;;
    libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) return 1 ;;
  esac
  return 0
}
elves=$(find "$stage/libexec" "$stage/ompi" -type f \( -name '*.so' -o -perm -u+x \) -exec sh -c \
  'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
for f in $elves; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  carried "$soname" && [ ! -e "$stage/lib/$soname" ] && cp -L "$path" "$stage/lib/$soname"
done
missing=$(for f in $elves; do ldd "$f" | grep 'not found' || true; done | sort -u)
[ -z "$missing" ] || { echo "make_kit: unresolved libraries here:"; echo "$missing"; exit 1; }
cp -L "$cuda_root/lib64/libcudart.so.13" "$stage/cuda-fallback/" 2>/dev/null ||
  cp -L "$(find "$cuda_root/" -name 'libcudart.so.13' | head -1)" "$stage/cuda-fallback/"

# Data the checks read: two of Debian's fortune files (the end-to-end fixtures' corpus).
for f in science wisdom; do cp /usr/share/games/fortunes/$f "$stage/data/$f"; done

cp scripts/gpu_kit/env.sh "$stage/env.sh"
kit_write_wrappers "$stage"

# The manifest: what was built from what, and every file's size and checksum.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
version_of() { sed -n "s/^#define $2 *\([0-9]*\).*/\1/p" "$1" | head -1; }
inc=$cuda_root/include
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores, from $build$(
    [ "${SKIP_BUILD:-0}" = 1 ] || echo ", built in $(( built - start )) s")"
  echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p'), GPU architectures" \
    "$(cache MEGATRAIN_CUDA_ARCHITECTURES), CUDA flags '$(cache CMAKE_CUDA_FLAGS)', host flags" \
    "'$(cache CMAKE_CXX_FLAGS)'$([ "$(cache MEGATRAIN_NATIVE)" = ON ] && echo ' -march=native (this CPU only)')"
  echo "cuBLAS $(version_of "$inc/cublas_api.h" CUBLAS_VER_MAJOR).$(version_of "$inc/cublas_api.h" CUBLAS_VER_MINOR).$(version_of "$inc/cublas_api.h" CUBLAS_VER_PATCH)"
  echo "cuDNN $(version_of "$inc/cudnn_version.h" CUDNN_MAJOR).$(version_of "$inc/cudnn_version.h" CUDNN_MINOR).$(version_of "$inc/cudnn_version.h" CUDNN_PATCHLEVEL)"
  echo "NCCL $(version_of "$inc/nccl.h" NCCL_MAJOR).$(version_of "$inc/nccl.h" NCCL_MINOR).$(version_of "$inc/nccl.h" NCCL_PATCH)"
  echo "cuDNN frontend 1.32.0"
  echo "glibc needed $(for f in $elves "$stage"/lib/*; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  echo "open mpi $(ompi_info --parsable | sed -n 's/^ompi:version:full://p')"
  echo "files:"
  (cd "$stage" && find . -type f ! -name MANIFEST | sort | while read -r f; do
     printf '%10d %s %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)" "${f#./}"
   done)
} >"$stage/MANIFEST"

echo "== pack $out/kit.tar.xz"
mkdir -p "$out"
tar -C "$stage" --transform 's,^\.,kit,' -cf - . | xz -T"$(nproc)" -6 >"$out/kit.tar.xz.tmp"
mv "$out/kit.tar.xz.tmp" "$out/kit.tar.xz"
raw=$(du -sm "$stage" | cut -f1)
packed=$(du -m "$out/kit.tar.xz" | cut -f1)
# A tracked file deleted in the working tree (du fails on it) does not travel.
repo_mb=$({ git ls-files -z | xargs -0 du -cb 2>/dev/null || true; } | tail -1 | awk '{printf "%.1f", $1 / 1048576}')
echo "make_kit: $out/kit.tar.xz: $packed MiB ($raw MiB unpacked, $(ls "$stage/lib" | wc -l) libraries," \
  "$(find "$stage/ompi" -name '*.so' | wc -l) Open MPI/PMIx plugins); with the repository's tracked files" \
  "($repo_mb MiB) the carried total must stay under 64 MiB"
echo "make_kit: built in $(( (built - start + 30) / 60 )) min, collected and packed in $(( $(date +%s) - built )) s"
