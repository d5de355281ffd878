#!/usr/bin/env bash
# with_gpus.sh CMD [ARGS…]: runs CMD with MEGATRAIN_TEST_GPUS set to the number of GPUs that
# nvidia-smi lists, or exits 77 (ctest's SKIP_RETURN_CODE) saying why when there are none. When
# CMD, a GoogleTest binary, passes with a case skipped ("[  SKIPPED ]" in its output: a case that
# needs more GPUs than there are), it exits 77 too, so ctest reports the case skipped, never
# passed. A listing of the cases (--gtest_list_tests: ctest's discovery) runs on any machine.
set -uo pipefail
for arg in "$@"; do
  [ "$arg" = --gtest_list_tests ] && exec "$@"
done
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -eq 0 ]; then
  echo "skipped: no GPU (nvidia-smi -L lists none); this runs the end-to-end device tests with the megatrain binary on GPUs"
  exit 77
fi
export MEGATRAIN_TEST_GPUS=$gpus
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && grep -q '^\[  SKIPPED \]' "$out"; then
  echo "with_gpus.sh: reported as skipped, not passed: a case above skipped (GoogleTest printed why)"
  exit 77
fi
exit "$rc"
