#!/usr/bin/env bash
# A 3D-parallel run: configs/demo_3d.toml (tp = pp = dp = 2) on 8 MPI ranks of this machine, one
# thread each, on byte-level tokens of Debian's fortune files (science: train, wisdom: valid).
#   bash scripts/demo_3d.sh [ARGS...]    ARGS go to `megatrain train` (e.g. --set train.steps=10)
# MEGATRAIN_BIN overrides the binary (default build/megatrain); DEMO3D_DIR the data folder
# (default runs/demo3d).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${DEMO3D_DIR:-runs/demo3d}
corpus=/usr/share/games/fortunes
[ -x "$bin" ] || { echo "demo_3d: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
[ -d "$corpus" ] || { echo "demo_3d: $corpus not found; run scripts/setup.sh (Debian package fortunes)" >&2; exit 2; }
mkdir -p "$dir"
for part in train:science valid:wisdom; do
  "$bin" preprocess --tokenizer bytes --doc-separator % --input "$corpus/${part#*:}" \
    --output-prefix "$dir/${part%%:*}" > /dev/null
done
# Open MPI refuses to run as root unless told; 8 ranks may exceed the cores, hence --oversubscribe.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpirun --oversubscribe -np 8 -x OMP_NUM_THREADS=1 "$bin" train --config configs/demo_3d.toml \
  --set "data.train=\"$dir/train\"" --set "data.valid=\"$dir/valid\"" "$@"
