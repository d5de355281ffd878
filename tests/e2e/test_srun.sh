#!/usr/bin/env bash
# End-to-end launch test through Slurm: `srun -n 2 --mpi=pmix megatrain train` on a tiny byte-level
# dataset (Debian's GPL-3 text) must form one MPI world of 2 ranks (log line "dp = 2") and exit 0.
#
# Run:  bash tests/e2e/test_srun.sh build/megatrain        (ctest runs it as `srun_e2e`, label e2e)
# Needs a Slurm controller that answers `scontrol ping` and can run 2 tasks at once (one machine:
# scripts/slurm/single_node_setup.sh). Without one it prints "SKIPPED: no Slurm controller" and exits
# 77, which ctest reports as skipped (SKIP_RETURN_CODE 77). Environment: SRUN_MPI (default pmix).
set -euo pipefail

bin=${1:?usage: test_srun.sh PATH/TO/megatrain}
bin=$(realpath "$bin")
mpi=${SRUN_MPI:-pmix}

if ! command -v srun >/dev/null || ! command -v scontrol >/dev/null; then
  echo "SKIPPED: no Slurm controller (srun/scontrol not on PATH)"
  exit 77
fi
if ! timeout 10 scontrol ping 2>/dev/null | grep -q UP; then
  echo "SKIPPED: no Slurm controller (scontrol ping does not answer UP)"
  exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/megatrain-srun.XXXXXX")
trap 'rm -rf "$dir"' EXIT

source "$(dirname "$0")/../tiny_model.sh"
tiny_model "$bin" "$dir" 4 8 3

set +e
out=$(cd "$dir" && OMP_NUM_THREADS=1 timeout 300 srun -n 2 --mpi="$mpi" --immediate=60 --job-name=megatrain-srun-test \
  "$bin" train --config "$dir/tiny.toml" 2>&1)
rc=$?
set -e
fail() { echo "$out"; echo "FAILED: $*"; exit 1; }
[[ $rc -eq 0 ]] || fail "srun exited with $rc"
grep -q "rank 0 of 2, local rank 0 of 2 on host" <<<"$out" || fail "no 'rank 0 of 2, local rank 0 of 2' line"
grep -q "dp = 2," <<<"$out" || fail "no 'dp = 2' line: the 2 tasks did not form one MPI world (wrong --mpi?)"
grep -E "local rank|dp = 2,|^step " <<<"$out"
echo "PASSED: srun -n 2 --mpi=$mpi formed one world of 2 data-parallel ranks"
