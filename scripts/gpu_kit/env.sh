# The GPU kit's environment (scripts/gpu_kit/make_kit.sh copies this file into the kit): sourced by
# each of the kit's bin/ wrappers, so it reaches only the kit's own processes (never nvidia-smi or
# the image's Python). Idempotent: a process the kit started (mpirun → orted → megatrain) inherits
# it and sources it again for nothing.
#   MEGATRAIN_CUDA_LIBS   folders searched first for CUDA's libraries (':'-separated)
# CUDA's libraries are the image's: for each soname the first folder that has it, among the pip
# nvidia-* wheels of any Python on the machine, /usr/local/cuda and the system's folders; the kit's
# own CUDA runtime (cuda-fallback/) comes last. `kit_cuda_report` says which file each resolved to.
MEGATRAIN_KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MEGATRAIN_KIT
if [ "${MEGATRAIN_KIT_ENV:-}" != "$MEGATRAIN_KIT" ]; then
  export MEGATRAIN_KIT_ENV=$MEGATRAIN_KIT
  kit_cuda_sonames=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13)
  kit_cuda_dirs=()
  for so in "${kit_cuda_sonames[@]}"; do
    for d in ${MEGATRAIN_CUDA_LIBS//:/ } /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
      /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
      /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
      /usr/lib/x86_64-linux-gnu /usr/lib64; do
      if [ -e "$d/$so" ]; then
        case " ${kit_cuda_dirs[*]} " in *" $d "*) ;; *) kit_cuda_dirs+=("$d") ;; esac
        break
      fi
    done
  done
  kit_cuda_path=$(IFS=:; echo "${kit_cuda_dirs[*]}")
  export LD_LIBRARY_PATH=$MEGATRAIN_KIT/lib${kit_cuda_path:+:$kit_cuda_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$MEGATRAIN_KIT/cuda-fallback
  # Open MPI and PMIx relocated into the kit (Debian's build: libdir and pkglibdir below the prefix,
  # sysconfdir and PMIx's plugin folder absolute, so those are set here). A build folder laid out
  # as a kit (bench/gpu/check_lib.sh) has none and uses the machine's mpirun.
  if [ -d "$MEGATRAIN_KIT/ompi" ]; then
    export OPAL_PREFIX=$MEGATRAIN_KIT/ompi/usr
    export OPAL_SYSCONFDIR=$MEGATRAIN_KIT/ompi/etc/openmpi
    export PMIX_INSTALL_PREFIX=$MEGATRAIN_KIT/ompi/pmix PMIX_PREFIX=$MEGATRAIN_KIT/ompi/pmix
    export PMIX_MCA_mca_base_component_path=$MEGATRAIN_KIT/ompi/pmix/lib/pmix
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    export OMPI_MCA_mca_base_component_show_load_errors=0
    export MEGATRAIN_MPIRUN=$OPAL_PREFIX/bin/orterun
  else
    MEGATRAIN_MPIRUN=$(command -v mpirun)
    export MEGATRAIN_MPIRUN
  fi
  # One host, no ssh: Open MPI's rsh launcher refuses to start without an ssh or rsh binary.
  export OMPI_MCA_plm=isolated OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PATH=$MEGATRAIN_KIT/bin:$PATH
  export MEGATRAIN_BIN=$MEGATRAIN_KIT/bin/megatrain MEGATRAIN_FORTUNES=$MEGATRAIN_KIT/data
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  unset kit_cuda_sonames kit_cuda_dirs kit_cuda_path so d
fi

# One line per CUDA soname the kit's binaries load: the file it resolved to, or "not found".
kit_cuda_report() {
  local so path
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
    path=$(ldd "$MEGATRAIN_KIT"/libexec/* 2>/dev/null |
      awk -v so="$so" '$1 == so && $3 ~ /^\// {print $3; exit}')
    printf '%-18s %s\n' "$so" "${path:-not found}${path:+ ($(readlink -f "$path"))}"
  done
}
