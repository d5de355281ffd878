# The GPU kit's layout (sourced by scripts/gpu_kit/make_kit.sh, which packs a kit, and by
# bench/gpu/check_lib.sh, which lays a build folder out the same way so that a machine that can
# build runs bench/gpu/device_check.sh on its own build):
#   libexec/   the binaries the device check runs          bin/   a wrapper for each, plus mpirun
#   lib/       the shared libraries an image may lack       ompi/  Open MPI and PMIx, relocatable
#   cuda-fallback/  a CUDA runtime, searched last           data/  the corpus the checks read
#   env.sh     the environment every wrapper sources        MANIFEST  what it was built from
kit_targets=(megatrain test_device_gpu test_device_e2e kernel_times test_nccl_cuda)

# kit_write_wrappers DIR: DIR/bin/NAME for each binary of DIR/libexec (sources env.sh, then execs
# it), bin/mpirun (the kit's Open MPI where it has one, else the machine's) and bin/kit-env (any
# command, or a function of env.sh such as kit_cuda_report, with the kit's environment).
kit_write_wrappers() {
  local dir=$1 f name
  mkdir -p "$dir/bin"
  for f in "$dir"/libexec/*; do
    name=$(basename "$f")
    printf '#!/usr/bin/env bash\n. "$(dirname "$0")/../env.sh"\nexec "$MEGATRAIN_KIT/libexec/%s" "$@"\n' \
      "$name" >"$dir/bin/$name"
  done
  printf '#!/usr/bin/env bash\n. "$(dirname "$0")/../env.sh"\nexec "$MEGATRAIN_MPIRUN" "$@"\n' >"$dir/bin/mpirun"
  printf '#!/usr/bin/env bash\n. "$(dirname "$0")/../env.sh"\n"$@"\n' >"$dir/bin/kit-env"
  chmod +x "$dir"/bin/*
}
