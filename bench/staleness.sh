#!/usr/bin/env bash
# Bounded staleness (parallel.max_staleness) against synchronous training with hiccuping ranks:
# a small GPT (configs/demo.toml's shape cut to 2 blocks of width 128, sequences of 64, byte-level
# tokens of Debian's fortunes "science") on 2 data-parallel ranks, each rank sleeping HICCUP_MS at
# the start of every PERIOD-th step, out of phase (rank 0 at steps 1, 1 + PERIOD, …; rank 1 half a
# period later: MEGATRAIN_FAULT slow with every=PERIOD). Synchronous training pays both ranks'
# hiccups; with staleness s a rank absorbs a peer's hiccup while it is at most s steps behind.
# For s = 0, 1, 2, 4, REPEATS runs each: time-to-loss (rank 0's summed step times until the mean
# loss of the last 5 steps reaches a target; TARGETS=a,b,… or by default the losses the first
# synchronous run reaches at 25, 40 and 60% of its steps), the run's time and its ratio to s = 0,
# the median step time and the last loss, as medians over the repeats; curves overlaid with
# scripts/plot_metrics.py.
#   bench/staleness.sh [DIR]        (DIR default runs/staleness)
# Environment: MEGATRAIN_BIN (build/megatrain), STEPS (120), REPEATS (3), HICCUP_MS (400),
# PERIOD (8), TARGETS (losses, comma-separated), EXTRA (more `--set key=value` flags, e.g. a
# learning rate), SKIP_RUNS=1 (only summarise DIR). Runs are `mpirun --oversubscribe -np 2` with
# one thread per rank under `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`; no checkpoints. Losses
# do not depend on the machine's load; step times do: compare ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/staleness}
steps=${STEPS:-120}
repeats=${REPEATS:-3}
hiccup=${HICCUP_MS:-400}
period=${PERIOD:-8}
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ "$period" -ge 2 ] || { echo "$0: PERIOD=$period: the two ranks' hiccups need a period of at least 2 steps" >&2; exit 2; }
mkdir -p "$dir"
settings="0 1 2 4"

if [ "${SKIP_RUNS:-0}" != 1 ]; then
  if [ ! -s "$dir/science.idx" ]; then
    "$bin" preprocess --tokenizer bytes --doc-separator % --input /usr/share/games/fortunes/science \
      --output-prefix "$dir/science" > "$dir/preprocess.log" 2>&1 ||
      { echo "$0: preprocessing failed; see $dir/preprocess.log" >&2; exit 1; }
  fi
  fault="slow:rank=0:ms=$hiccup:every=$period;slow:rank=1:ms=$hiccup:from_step=$((1 + period / 2)):every=$period"
  for rep in $(seq 1 "$repeats"); do
    for s in $settings; do
      name="s${s}_r${rep}"
      echo "== max_staleness $s, repeat $rep: $steps steps on 2 ranks, $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
      rm -f "$dir/$name.jsonl"
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT="$fault" \
        "$bin" train --config configs/demo.toml --set model.vocab_size=257 --set model.n_layers=2 \
        --set model.d_model=128 --set model.n_heads=4 --set model.max_seq_len=64 --set train.seq_len=64 \
        --set train.micro_batch_size=8 --set train.global_batch_size=16 --set train.steps="$steps" \
        --set train.eval_interval=0 --set optimizer.warmup_steps=10 --set log.interval=1 \
        --set log.peak_tflops=0 --set data.train="\"$dir/science\"" --set data.valid='""' \
        --set checkpoint.save_interval=0 --set checkpoint.dir='""' --set parallel.max_staleness="$s" \
        --set log.metrics_file="\"$dir/$name.jsonl\"" ${EXTRA:-} > "$dir/$name.log" 2>&1 ||
        { echo "$0: run $name failed; see $dir/$name.log" >&2; tail -5 "$dir/$name.log" >&2; exit 1; }
    done
  done
fi

/usr/bin/python3 - "$dir" "$repeats" "${TARGETS:-}" $settings <<'PY'
import json, statistics, sys
d, repeats, targets, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def load(name):
    return [l for l in (json.loads(x) for x in open(f"{d}/{name}.jsonl") if x.strip()) if "step_time_ms" in l]
def smoothed(rows):  # (step, mean loss of the last 5 steps, seconds since the start)
    out, t = [], 0.0
    for i, r in enumerate(rows):
        t += r["step_time_ms"] / 1e3
        window = [x["loss"] for x in rows[max(0, i - 4):i + 1]]
        out.append((r["step"], sum(window) / len(window), t))
    return out
first = smoothed(load("s0_r1"))
goals = [float(x) for x in targets.split(",")] if targets else [first[int(f * len(first)) - 1][1] for f in (0.25, 0.4, 0.6)]
print(f"medians over {repeats} runs; time to target = rank 0's summed step times until the mean loss of 5 steps "
      f"reaches it (-: not within the run)\n")
print("| max_staleness | " + " | ".join(f"time to {g:.3f} (s)" for g in goals) +
      " | run time (s) | vs s = 0 | step ms (median) | last loss |")
print("|---|" + "---|" * len(goals) + "---|---|---|---|")
base = None
for s in settings:
    ttl, total, ms, last = [[] for _ in goals], [], [], []
    for rep in range(1, repeats + 1):
        rows = load(f"s{s}_r{rep}")
        curve = smoothed(rows)
        for i, g in enumerate(goals):
            ttl[i].append(next((t for k, l, t in curve if l <= g), float("inf")))
        total.append(curve[-1][2])
        ms.append(statistics.median(r["step_time_ms"] for r in rows[1:]))
        last.append(rows[-1]["loss"])
    run = statistics.median(total)
    base = base or run
    cells = " | ".join("-" if statistics.median(x) == float("inf") else f"{statistics.median(x):.1f}" for x in ttl)
    print(f"| {s} | {cells} | {run:.1f} | {run / base:.2f} | {statistics.median(ms):.0f} | {statistics.median(last):.3f} |")
PY
/usr/bin/python3 scripts/plot_metrics.py $(for s in $settings; do echo "$dir/s${s}_r1.jsonl"; done) -o "$dir/curves.png"
echo "curves: $dir/curves.png"
