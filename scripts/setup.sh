#!/usr/bin/env bash
# Installs every Debian package megatrain's build, tests and demo need, then
# configures and builds it in ./build (Release). Safe to run again.
#   scripts/setup.sh            install + build
#   SKIP_APT=1 scripts/setup.sh no Debian packages (SKIP_PIP=1: no test-reference venv either)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  libopenblas-openmp-dev libblis-dev libdnnl-dev
  # dnnl-config.cmake requires OpenCL's headers and libOpenCL.so, because Debian builds oneDNN with
  # its OpenCL GPU runtime; libdnnl-dev only recommends them, and we install without recommends.
  ocl-icd-opencl-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libpcre2-dev
  libsimdjson-dev
  # data/bpe_tokenizer.cpp: the NFC normalizer of Qwen's tokenizer.json files
  libutf8proc-dev
  # checkpoint/crc32.h: the CRC-32 of libdeflate, the values of zlib at several times its speed
  libdeflate-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-min python3 python3-matplotlib python3-numpy python3-venv
  # PyTorch for the test references in build/pyref: transformers and megatron-core run on it.
  # Debian's CPU-only 1.13 is a 130 MB download; PyPI's torch wheel would pull gigabytes of CUDA libraries.
  python3-torch
  time
  # .clang-format: the house style, for the lines a change touches (docs/architecture.md).
  clang-format
  # scripts/simhosts, the simulated hosts of tests/e2e/test_simhosts.sh: ip netns, veth, tc tbf.
  iproute2
  # scripts/slurm/simcluster, a Slurm cluster of simulated hosts for tests/e2e/test_slurm_multinode.sh;
  # installing them starts no daemon and writes no cluster configuration.
  slurmctld slurmd slurm-client munge
  # tests/e2e/test_checkpoint_commit_e2e.cpp watches a save's fsyncs and renames with it, skipped without.
  strace
  # scripts/check_fresh_setup.sh bootstraps a clean Debian root with it.
  debootstrap
)

if [ "${SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# The test references this project did not write (tests/reference/README.md), pinned in
# scripts/requirements-ref.txt, in a venv over Debian's python3 that also sees its numpy and torch.
# scripts/requirements-ref-nodeps.txt is installed without dependencies: those packages declare a
# newer torch than Debian's, which pip would fetch from PyPI, and the parts we use run on Debian's.
# Reinstalled only when one of the two files changes.
venv=build/pyref
if [ "${SKIP_PIP:-0}" != 1 ]; then
  [ -x "$venv/bin/python3" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  if ! cmp -s scripts/requirements-ref.txt "$venv/requirements-ref.txt" ||
     ! cmp -s scripts/requirements-ref-nodeps.txt "$venv/requirements-ref-nodeps.txt"; then
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r scripts/requirements-ref.txt
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps -r scripts/requirements-ref-nodeps.txt
    cp scripts/requirements-ref.txt scripts/requirements-ref-nodeps.txt "$venv/"
  fi
fi

# minja (Google, MIT): the header-only Jinja renderer of chat templates (data/chat_template.h). PyPI
# ships it inside the llama-cpp-python 0.3.16 source package (vendor/llama.cpp/vendor/minja), with the
# published chat templates its tests render (models/templates); only those files are unpacked into
# build/_deps/minja, once, from the pinned, hash-checked package. Its metadata is prepared with
# scikit-build-core from a throwaway venv (with build isolation pip would fetch a whole toolchain).
minja_dir=build/_deps/minja
if [ ! -f "$minja_dir/minja.hpp" ]; then
  tmp=$(mktemp -d)
  /usr/bin/python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/python3" -m pip install -q --disable-pip-version-check scikit-build-core
  "$tmp/venv/bin/python3" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation -d "$tmp" llama-cpp-python==0.3.16
  echo "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6  $tmp/llama_cpp_python-0.3.16.tar.gz" |
    sha256sum -c --quiet
  src=llama_cpp_python-0.3.16/vendor/llama.cpp
  templates=(meta-llama-Llama-3.1-8B-Instruct.jinja Qwen-Qwen3-0.6B.jinja)
  tar xzf "$tmp/llama_cpp_python-0.3.16.tar.gz" -C "$tmp" "$src/vendor/minja/minja.hpp" \
    "${templates[@]/#/$src/models/templates/}"
  mkdir -p "$minja_dir/templates"
  cp "$tmp/$src/vendor/minja/minja.hpp" "$minja_dir/"
  for t in "${templates[@]}"; do cp "$tmp/$src/models/templates/$t" "$minja_dir/templates/"; done
  rm -rf "$tmp"
fi

# The CUDA toolkit where NVIDIA's installers put it, when its nvcc is not on PATH: the cuDNN
# frontend below is fetched only where nvcc is found, and CMake's check_language(CUDA) looks on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
  echo "setup: nvcc is not on PATH; using /usr/local/cuda/bin/nvcc"
fi

# cuDNN's frontend, header-only C++ that NVIDIA ships on PyPI as the nvidia-cudnn-frontend wheel,
# for the CUDA backend's fused attention (kernels/cuda/cudnn_attention.h): only its include/ folder,
# unpacked into build/_deps, where a CUDA toolkit is installed. Pinned; fetched once.
cudnn_fe=1.32.0
fe_dir=build/_deps/cudnn_frontend-$cudnn_fe
if [ "${SKIP_PIP:-0}" != 1 ] && command -v nvcc >/dev/null && [ ! -f "$fe_dir/include/cudnn_frontend.h" ]; then
  tmp=$(mktemp -d)
  "$venv/bin/python3" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$cudnn_fe"
  "$venv/bin/python3" -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/wheel"
  mkdir -p "$fe_dir"
  cp -r "$tmp/wheel/include" "$fe_dir/"
  rm -rf "$tmp"
fi

build_type=${BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" ${MEGATRAIN_CMAKE_ARGS:-}
# Whether the CUDA backend is built, as the configure step decided (MEGATRAIN_CUDA in its cache).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" build/CMakeCache.txt; }
nvcc_found=$(command -v nvcc || true)
if [ "$(cache_value MEGATRAIN_CUDA)" = ON ]; then
  nvcc_used=$(cache_value CMAKE_CUDA_COMPILER)
  nvcc_version=$("$nvcc_used" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  echo "setup: CUDA backend: ON (nvcc $nvcc_version at $nvcc_used)"
elif [ -n "$nvcc_found" ]; then
  echo "setup: CUDA backend: OFF (MEGATRAIN_CUDA=OFF was asked for; nvcc is at $nvcc_found)"
else
  echo "setup: CUDA backend: OFF (no nvcc found on PATH or at /usr/local/cuda/bin/nvcc;" \
    "install the CUDA toolkit to build it)"
fi
cmake --build build -j "$(nproc)"
echo "setup: built build/megatrain"
