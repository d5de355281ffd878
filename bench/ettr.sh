#!/usr/bin/env bash
# The effective-training-time benchmark (issue 34, docs/robustness.md R25/R26): one workload under
# scripts/megatrain-resilient, with memory snapshots and then without (storage checkpoints only),
# and per mode the ETTR (MegaScale's: productive steps × median iteration time ÷ wall time), the
# steps each fault cost and its recovery time broken down (the driver's RECOVERY events).
#
# Workload: the demo model (configs/demo.toml: GPT, 4 layers, d_model 256, vocabulary 4096, seq 128)
# on the demo's data, 8 ranks on 2 hosts simulated with network namespaces (scripts/simhosts: 4 ranks
# each, dp 8, ZeRO 1, micro-batch 4, global batch 32), 5·M steps. Storage checkpoints, written in the
# background (checkpoint.async): every SAVE steps without memory snapshots, every SAVE_MEMORY steps
# with them (memory mode: snapshots every step; storage is then for losing more than a host and its
# buddy, as Gemini saves to remote storage far less often than to peer memory). One fault every M
# steps, in this order:
#   1. kill       rank 5 (on simhost2) SIGKILLed at step M
#   2. host loss  at step 2M every process of simhost2 killed, its memory store wiped and its cable
#                 pulled: the job goes on at dp 4 on simhost1 (re-sharded snapshots, or storage)
#   3. hang       rank 2 stopped (SIGSTOP) at step 3M
#   4. frozen     rank 1 stopped inside a collective at step 4M (hang how=freeze); simhost2 is plugged
#                 back in before, so the relaunch readmits it (--probe-lost-hosts) and dp is 8 again
# A stopped rank's heartbeats (every HB/4 s) stop: the driver finds it after HB s (--hb-timeout-s), before
# the other ranks' watchdogs would (step timeout FACTOR × the slowest of the first 5 steps, at least
# FLOOR s); one stopped rank among live ones on its host does not make the driver leave the host out.
# Each in-job fault acts in its own launch (attempt=N), so the relaunch that recovers from it does not
# meet it again.
#   bench/ettr.sh [DIR]         (DIR default runs/bench_ettr)
# The 8 ranks share this machine's cores while each simulated host declares 4 slots, so mpirun would
# not know it oversubscribes: mpi_yield_when_idle makes a rank waiting in MPI yield its core (what
# mpirun does by itself when it knows), else 8 busy-polling ranks slow every collective of start-up.
# Environment: MEGATRAIN_BIN (build/megatrain), M (100), SAVE (50), SAVE_MEMORY (250), FLOOR (5),
# FACTOR (3), HB (1),
# MODES ("memory storage"; "clean" adds the same run without faults: what the workload's ETTR is
# without them).
# Needs root and network namespaces (prints SKIPPED otherwise). Runs with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset (they halve OpenBLAS on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=$(realpath "${MEGATRAIN_BIN:-build/megatrain}")
dir=$(realpath -m "${1:-runs/bench_ettr}")
m=${M:-100}
save=${SAVE:-50}
save_memory=${SAVE_MEMORY:-250}
floor=${FLOOR:-5}
factor=${FACTOR:-3}
hb=${HB:-1}
modes=${MODES:-memory storage}
sim=$root/scripts/simhosts
[ -x "$bin" ] || { echo "$0: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "SKIPPED: network namespaces need root"; exit 0; }
[ -e runs/demo/fortunes_train.idx ] || MEGATRAIN_BIN="$bin" bash scripts/demo.sh --data-only
mkdir -p "$dir"
shm=/dev/shm/megatrain_ettr_$$
trap '"$sim" down; rm -rf "$shm"' EXIT
"$sim" down
"$sim" up 2
grep -m1 "model name" /proc/cpuinfo
echo "cpus: $(nproc); flags: $(grep -m1 -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "workload: demo model, 8 ranks on 2 simulated hosts, $((5 * m)) steps, a fault every $m steps, saves every" \
  "$save steps (storage only) or $save_memory (with memory snapshots)"

wait_for() {  # wait_for SECONDS CONDITION...
  local n=$(($1 * 10))
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  echo "$0: timed out waiting for: $*" >&2
  return 1
}
reached() { [ -s "$2/metrics.jsonl" ] && [ "$(tail -1 "$2/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')" -ge "$1" ]; }

run_mode() {  # MODE: memory | storage | clean (memory snapshots, no fault: the workload's ceiling)
  local mode=$1 out=$dir/$1 memory=1 every=$save_memory
  [ "$mode" = storage ] && memory=0 every=$save
  rm -rf "$out" "$shm"
  mkdir -p "$out"
  local fault="kill:rank=5:step=$m:sig=9:attempt=1;hang:rank=2:step=$((3 * m)):how=sigstop:attempt=3"
  fault+=";hang:rank=1:step=$((4 * m)):how=freeze:attempt=4"
  [ "$mode" = clean ] && fault=""
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MEGATRAIN_FAULT="$fault" "$root/scripts/megatrain-resilient" --checkpoint-dir "$out/ckpt" --run-dir "$out/run" \
    --hosts simhost1:4,simhost2:4 --backoff-s 0.2 --max-backoff-s 1 --max-restarts 20 --probe-lost-hosts \
    --probe-timeout-s 5 --hb-timeout-s "$hb" -- "$sim" mpirun -H '{hosts}' -np '{np}' --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 "$bin" train \
    --config configs/demo.toml --set train.steps=$((5 * m)) --set train.micro_batch_size=4 \
    --set train.eval_interval=0 --set parallel.zero_stage=1 --set log.interval=1 --set log.peak_tflops=0 \
    --set health.step_timeout_floor_s="$floor" --set health.step_timeout_factor="$factor" \
    --set health.heartbeat_interval_s="$(awk -v h="$hb" 'BEGIN { print h / 4 }')" \
    --set checkpoint.save_interval="$every" --set checkpoint.async=true \
    --set checkpoint.memory_interval="$memory" --set checkpoint.memory_dir="$shm" \
    --set log.samples_file="$out/samples.jsonl" >"$out/driver.log" 2>&1 &
  local drv=$!
  if [ "$mode" = clean ]; then
    wait "$drv" || { tail -30 "$out/driver.log"; echo "$0: the clean run did not finish" >&2; return 1; }
    /usr/bin/python3 "$root/bench/ettr_report.py" "$mode" "$out"
    return
  fi
  wait_for 1200 reached $((2 * m)) "$out/run"
  echo "{\"event\": \"HOST_LOSS\", \"step\": $(tail -1 "$out/run/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p'), \"t_wall\": $(date +%s.%N)}" >"$out/host_loss.json"
  ip netns pids simhost2 | xargs -r kill -9
  rm -rf "$shm/simhost2"
  wait_for 60 grep -q '"event": "HOST_EXCLUDED"' "$out/run/reports/events.jsonl"
  "$sim" link simhost2 down
  wait_for 1200 test -e "$out/run/attempt_4.log"
  "$sim" link simhost2 up
  wait "$drv" || { tail -30 "$out/driver.log"; echo "$0: the $mode run did not finish" >&2; return 1; }
  /usr/bin/python3 "$root/bench/ettr_report.py" "$mode" "$out"
}

for mode in $modes; do run_mode "$mode"; done
first=""
for mode in $modes; do
  [ -s "$dir/$mode/samples.jsonl" ] || continue
  if [ -z "$first" ]; then first=$mode; continue; fi
  cmp -s "$dir/$first/samples.jsonl" "$dir/$mode/samples.jsonl" && echo "sample logs of $first and $mode: identical" ||
    echo "sample logs of $first and $mode DIFFER"
done
