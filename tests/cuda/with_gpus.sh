#!/usr/bin/env bash
# with_gpus.sh CMD [ARGS…]: runs CMD with MEGATRAIN_TEST_GPUS set to the number of GPUs that
# nvidia-smi lists, or exits 77 (ctest's SKIP_RETURN_CODE) saying why when there are none.
set -uo pipefail
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -eq 0 ]; then
  echo "skipped: no GPU (nvidia-smi -L lists none); this runs the end-to-end device tests with the megatrain binary on GPUs"
  exit 77
fi
export MEGATRAIN_TEST_GPUS=$gpus
exec "$@"
