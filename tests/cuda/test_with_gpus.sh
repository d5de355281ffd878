#!/usr/bin/env bash
# tests/cuda/with_gpus.sh with a fake nvidia-smi (one GPU, or none) in front of PATH and fake
# GoogleTest binaries: a case that passes exits 0, one that skipped exits 77 (ctest's skip) and
# never 0, a failure keeps its code, no GPU is a skip, and a listing runs without a GPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/one" "$tmp/none"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n' >"$tmp/one/nvidia-smi"
printf '#!/bin/sh\nexit 9\n' >"$tmp/none/nvidia-smi"
chmod +x "$tmp/one/nvidia-smi" "$tmp/none/nvidia-smi"
# fake_gtest OUTCOME: prints what GoogleTest prints for one case with that outcome.
cat >"$tmp/fake_gtest" <<'FAKE'
#!/bin/sh
case "$1" in
  --gtest_list_tests) echo "DeviceE2E."; echo "  OneRankTrainsLikeTheCpu"; exit 0 ;;
  passed) echo "[       OK ] DeviceE2E.A (1 ms)"; echo "[  PASSED  ] 1 test."; exit 0 ;;
  skipped) echo "[  SKIPPED ] DeviceE2E.A (0 ms)"; echo "[  PASSED  ] 0 tests."
           echo "[  SKIPPED ] 1 test, listed below:"; echo "[  SKIPPED ] DeviceE2E.A"; exit 0 ;;
  failed) echo "[  FAILED  ] DeviceE2E.A (1 ms)"; exit 1 ;;
  gpus) echo "gpus=$MEGATRAIN_TEST_GPUS"; exit 0 ;;
esac
exit 3
FAKE
chmod +x "$tmp/fake_gtest"

failures=0
expect() {  # expect CODE GPUS ARG [TEXT]: with_gpus.sh under GPUS (one|none) exits CODE and prints TEXT
  local want=$1 gpus=$2 arg=$3 text=${4:-} out code
  out=$(PATH="$tmp/$gpus:$PATH" bash "$here/with_gpus.sh" "$tmp/fake_gtest" "$arg" 2>&1)
  code=$?
  if [ "$code" != "$want" ] || [[ "$out" != *"$text"* ]]; then
    echo "FAIL: $arg with $gpus GPU: exit $code (want $want), output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $arg with $gpus GPU: exit $code"
  fi
}
expect 0 one passed "[  PASSED  ] 1 test."
expect 77 one skipped "reported as skipped, not passed"
expect 1 one failed "[  FAILED  ]"
expect 0 one gpus "gpus=1"
expect 77 none passed "skipped: no GPU"
expect 0 none --gtest_list_tests "OneRankTrainsLikeTheCpu"
[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failed"; exit 1; }
