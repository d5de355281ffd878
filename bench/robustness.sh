#!/usr/bin/env bash
# Robustness benchmark on 4 ranks, (tp, dp) = (2, 2), a tiny GPT (2 layers, d 64, seq 64, the
# fortunes corpus), as the fault tests run it:
#  1. overhead: the median step time with every health feature off (watchdog, heartbeats,
#     straggler windows, replica checks, link probes), with the defaults on, and with the timeline on too —
#     REPS runs of STEPS steps each, interleaved, the first 10 steps of each discarded;
#  2. false positives: CLEAN clean runs of 60 steps with the tight settings of the tests (2 s step
#     timeout, 5 s for the first step, straggler windows of 10 steps, replica checks every 5 steps, link probes every 5 steps)
#     must print no WATCHDOG, UNSCHEDULED, STRAGGLER, INDIVIDUAL_DEGRADATION, REPLICA_MISMATCH, LOSS_SPIKE or
#     SLOW_LINK line and exit 0.
#  3. detection: DETECT injections of each of a hang in a job's first steps (a rank stopped at
#     step 1 or 2, before the step timeout is calibrated) and a frozen rank (stopped inside a
#     collective it had issued, `hang:…:how=freeze`, at step 5–20), on a random rank, with the
#     tests' settings and log.peak_tflops = 1 (so the first step's timeout is its 5 s minimum): the
#     time from the injection to the first WATCHDOG line (median, max), and in how many
#     `megatrain diagnose` names the rank and its host.
#   bench/robustness.sh [DIR]          (DIR default runs/bench_robustness)
# Environment: MEGATRAIN_BIN (default build/megatrain), REPS (5), STEPS (110), CLEAN (20), DETECT (20).
# Runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they halve OpenBLAS on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${MEGATRAIN_BIN:-build/megatrain}")
dir=${1:-runs/bench_robustness}
reps=${REPS:-5}
steps=${STEPS:-110}
clean=${CLEAN:-20}
detect=${DETECT:-20}
[ -x "$bin" ] || { echo "$0: $bin not found; run scripts/setup.sh first" >&2; exit 2; }
mkdir -p "$dir"
source tests/tiny_model.sh
tiny_model "$bin" "$dir" 8 16
grep -m1 "model name" /proc/cpuinfo
run() {  # NAME STEPS FLAGS...: one 4-rank run, metrics in DIR/NAME.jsonl, output in DIR/NAME.log
  local name=$1 n=$2
  shift 2
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    MEGATRAIN_FAULT="${fault:-}" mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT "$bin" train --config "$dir/tiny.toml" \
    --set parallel.tp=2 --set train.steps="$n" --set log.metrics_file="$dir/$name.jsonl" \
    --set health.run_dir="$dir/run_$name" "$@" > "$dir/$name.log" 2>&1
}
off="--set health.watchdog=false --set health.heartbeat_interval_s=0 --set health.straggler_window=0 --set health.replica_check_interval=0 --set health.spike_factor=0 --set health.link_check_interval=0"
for r in $(seq "$reps"); do
  # shellcheck disable=SC2086
  run "off_$r" "$steps" $off
  run "on_$r" "$steps"
  run "timeline_$r" "$steps" --set health.timeline=true
done
/usr/bin/python3 - "$dir" "$reps" <<'EOF'
import json, statistics, sys
d, reps = sys.argv[1], int(sys.argv[2])
def median_step(name):
    ms = [json.loads(l)["step_time_ms"] for l in open(f"{d}/{name}.jsonl") if "step_time_ms" in l]
    return statistics.median(ms[10:])
res = {c: statistics.median(median_step(f"{c}_{r}") for r in range(1, reps + 1)) for c in ("off", "on", "timeline")}
print(f"median step time over {reps} runs: health off {res['off']:.2f} ms, defaults on {res['on']:.2f} ms "
      f"({100 * (res['on'] / res['off'] - 1):+.1f} %), timeline on {res['timeline']:.2f} ms "
      f"({100 * (res['timeline'] / res['off'] - 1):+.1f} %)")
EOF
# The tests' watchdog settings (2 s floor, factor 1, calibrated after 3 steps, the first step's 5 s
# minimum through a known peak), for the clean runs and the injections alike.
tight="--set health.step_timeout_floor_s=2 --set health.calibrate_steps=3 --set health.step_timeout_factor=1 --set log.peak_tflops=1"
fp=0
for r in $(seq "$clean"); do
  # shellcheck disable=SC2086
  if ! run "clean_$r" 60 $tight --set health.straggler_window=10 --set health.replica_check_interval=5 --set health.link_check_interval=5; then
    echo "clean run $r failed: see $dir/clean_$r.log"; fp=$((fp + 1)); continue
  fi
  if grep -qE "WATCHDOG|UNSCHEDULED|STRAGGLER|INDIVIDUAL_DEGRADATION|REPLICA_MISMATCH|LOSS_SPIKE|SLOW_LINK" "$dir/clean_$r.log"; then
    grep -E "WATCHDOG|UNSCHEDULED|STRAGGLER|INDIVIDUAL_DEGRADATION|REPLICA_MISMATCH|LOSS_SPIKE|SLOW_LINK" "$dir/clean_$r.log" | head -3
    fp=$((fp + 1))
  fi
done
echo "false positives over $clean clean runs: $fp"
: > "$dir/detect.txt"
for r in $(seq "$detect"); do
  for kind in early frozen; do
    rank=$((RANDOM % 4))
    if [ "$kind" = early ]; then fault="hang:rank=$rank:step=$((1 + RANDOM % 2)):how=sigstop"
    else fault="hang:rank=$rank:step=$((5 + RANDOM % 16)):how=freeze"; fi
    rm -rf "$dir/run_${kind}_$r"
    # shellcheck disable=SC2086
    fault=$fault run "${kind}_$r" 200 $tight || true
    "$bin" diagnose "$dir/run_${kind}_$r" > "$dir/${kind}_$r.diagnose" 2>&1 || true
    echo "$kind $r $rank $fault" >> "$dir/detect.txt"
  done
done
/usr/bin/python3 - "$dir" <<'EOF'
import re, statistics, sys
d = sys.argv[1]
res = {}
for line in open(f"{d}/detect.txt"):
    kind, r, rank, fault = line.split()
    log, diag = open(f"{d}/{kind}_{r}.log").read(), open(f"{d}/{kind}_{r}.diagnose").read()
    inj, fired = re.search(r"FAULT_INJECTED .* t_wall=([0-9.]+)", log), re.search(r"WATCHDOG .* t_wall=([0-9.]+)", log)
    latency = float(fired[1]) - float(inj[1]) if inj and fired else None
    named = re.search(rf"^VERDICT rank\(s\) \{{{rank}\}} .*\(host \S+\)", diag, re.M) is not None
    res.setdefault(kind, []).append((latency, named, fault))
for kind, rows in res.items():
    lat = [x for x, _, _ in rows if x is not None]
    print(f"{kind}: {len(rows)} injections, detected {len(lat)}, detection median {statistics.median(lat):.2f} s, "
          f"max {max(lat):.2f} s; diagnose named the rank and host in {sum(n for _, n, _ in rows)}")
    for x, n, f in rows:
        if x is None or not n: print(f"  missed: {f} (detected {x}, named {n})")
EOF
