#!/usr/bin/env bash
# The planner against measurements on CPU ranks: for each layout of a small model (≤ 4 ranks), the
# memory per rank and step time `megatrain plan --given` predicts from the CPU profile that
# `megatrain plan --measure` measured (with the same number of ranks, computing at once as a run's do),
# against rank 0's metrics of a short training run (memory_bytes; median step_time_ms of the steps
# after the first two; the median over REPS runs of the layout). Prints a Markdown table with the
# 1-minute load average after each layout.
# The planner predicts a machine whose cores the run has to itself. Linux shares a busy machine's
# cores between sessions (autogroups) before it shares them between processes, and among the ranks
# favours those that wake from communication over those that compute throughout, so on a machine
# shared with other users a run's time says more about them than about the layout. The script
# therefore runs in a session of its own at autogroup priority PRIORITY (default -19; needs root or
# CAP_SYS_NICE, else it says so and runs at the normal priority); the profile is in CPU time and is
# not affected either way (planner/plan_profile.h).
# Usage: bench/plan_vs_measured.sh [BUILD_DIR] [STEPS] [REPS]   (data: /usr/share/games/fortunes/science)
set -euo pipefail
if [[ -z "${PLAN_BENCH_SESSION:-}" ]]; then PLAN_BENCH_SESSION=1 exec setsid --wait "$0" "$@"; fi
if ! echo "${PRIORITY:--19}" 2>/dev/null >/proc/self/autogroup; then
  echo "note: could not set autogroup priority ${PRIORITY:--19}: measured times include other users' load" >&2
fi
BUILD=${1:-build}
STEPS=${2:-8}
REPS=${3:-3}
BIN=$(realpath "$BUILD/megatrain")
WORK=$(mktemp -d /tmp/plan_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MPI=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -x OMP_NUM_THREADS=1)

"$BIN" preprocess --tokenizer bytes --doc-separator % --input /usr/share/games/fortunes/science \
  --output-prefix "$WORK/science" >/dev/null
cat >"$WORK/small.toml" <<TOML
[model]
n_layers = 4
d_model = 128
n_heads = 4
vocab_size = 257
max_seq_len = 128
[train]
seq_len = 128
micro_batch_size = 4
global_batch_size = 16
steps = $STEPS
[data]
train = "$WORK/science"
[log]
interval = 1
peak_tflops = 0
TOML

# np | --set flags of the layout
LAYOUTS=(
  "1|"
  "2|parallel.zero_stage=0"
  "2|parallel.zero_stage=1"
  "4|parallel.zero_stage=3"
  "2|parallel.tp=2 parallel.sequence_parallel=true"
  "2|parallel.pp=2"
  "4|parallel.tp=2 parallel.pp=2"
  "2|parallel.zero_stage=2 train.recompute=full"
  "4|parallel.pp=2 parallel.zero_stage=1 train.recompute=selective"
  "4|parallel.pp=4 parallel.pipeline_schedule=zero_bubble"
  "4|parallel.tp=2 parallel.sequence_parallel=true parallel.zero_stage=1"
)

declare -A PROFILE

echo "| ranks | layout | memory predicted MiB | measured MiB | error | step predicted ms | measured ms | error | load |"
echo "|---|---|---|---|---|---|---|---|---|"
i=0
for entry in "${LAYOUTS[@]}"; do
  np=${entry%%|*}
  sets=""
  for s in ${entry#*|}; do sets+=" --set $s"; done
  if [[ -z "${PROFILE[$np]:-}" ]]; then
    "${MPI[@]}" -np "$np" "$BIN" plan --measure --config "$WORK/small.toml" --profile-out "$WORK/cpu$np.toml" >/dev/null
    PROFILE[$np]="$WORK/cpu$np.toml"
  fi
  for r in $(seq "$REPS"); do
    "${MPI[@]}" -np "$np" "$BIN" train --config "$WORK/small.toml" $sets --set log.metrics_file="\"$WORK/m$i.$r.jsonl\"" \
      >/dev/null
  done
  "$BIN" plan --given --json --config "$WORK/small.toml" $sets --gpus "$np" --gpu cpu --profile "${PROFILE[$np]}" \
    >"$WORK/p$i.json"
  python3 - "$WORK/p$i.json" "$np" "$WORK"/m$i.*.jsonl <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
runs = [[json.loads(l) for l in open(f) if '"step_time_ms"' in l] for f in sys.argv[3:]]
keys = ["params", "master_params", "grads", "optimizer", "activations", "comm_buffers"]
measured = sum(runs[0][0]["memory_bytes"][k] for k in keys)
predicted = plan["memory_bytes"]["total"]
step = statistics.median(statistics.median(r["step_time_ms"] for r in rows[2:]) for rows in runs)
load = open("/proc/loadavg").read().split()[0]
MiB = 1 << 20
print(f"| {sys.argv[2]} | {plan['layout']} | {predicted / MiB:.2f} | {measured / MiB:.2f} | "
      f"{100 * (predicted / measured - 1):+.1f}% | {plan['step_ms']:.1f} | {step:.1f} | "
      f"{100 * (plan['step_ms'] / step - 1):+.0f}% | {load} |")
PY
  i=$((i + 1))
done
