#!/usr/bin/env bash
# Context-parallel benchmark: one long sequence (16384 tokens by default) of a small Llama-like
# model (2 blocks, d_model 128, 4 heads of 32, RoPE, SwiGLU; all_to_all at cp 4 needs 4 key/value heads) on 1, 2 and
# 4 CPU ranks, ring and all-to-all attention: step time, activation memory per rank against one
# process's, and how much of the cp group's communication the attention leaves exposed; then the
# largest sequence whose activations fit a stated memory per rank at cp 1 and at cp 4.
#   bench/context_parallel.sh [DIR]          (DIR default runs/bench_cp)
# Environment: MEGATRAIN_BIN (default build/megatrain), SEQ (16384), REPS (2), STEPS (3; the first
# WARMUP=1 discarded), CASES (subset of the cases below), BUDGET_MIB (activation memory per rank for
# the largest-sequence line, default 256), SKIP_RUNS=1 (only summarise DIR's metrics files).
# Cases (micro-batch 1, global batch 1: every rank of a case works on the same one sequence):
#   cp1        1 rank
#   cp2_ring   2 ranks, parallel.cp = 2, cp_comm = "ring"
#   cp2_a2a    2 ranks, cp_comm = "all_to_all"
#   cp4_ring   4 ranks (on a 2-core machine two share each core: more ranks than cores)
#   cp4_a2a    4 ranks, all_to_all
# One thread per rank. Activations are the stage's planned arena (memory_bytes.activations: every
# activation buffer to the byte, no allocator slack), linear in the sequence length, so the largest
# sequence for a budget follows from the measured bytes per token at each cp.
# Runs through bench/run_cases.sh: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`, mpirun, the
# bytes tokenizer over Debian's /usr/share/common-licenses as data.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_cp}
reps=${REPS:-2}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
seq=${SEQ:-16384}
budget=${BUDGET_MIB:-256}
all_cases="cp1 cp2_ring cp2_a2a cp4_ring cp4_a2a"
cases=${CASES:-$all_cases}
case_args() {
  case $1 in
    cp1)      echo 1 ;;
    cp2_ring) echo 2 --set parallel.cp=2 --set parallel.cp_comm='"ring"' ;;
    cp2_a2a)  echo 2 --set parallel.cp=2 --set parallel.cp_comm='"all_to_all"' ;;
    cp4_ring) echo 4 --set parallel.cp=4 --set parallel.cp_comm='"ring"' ;;
    cp4_a2a)  echo 4 --set parallel.cp=4 --set parallel.cp_comm='"all_to_all"' ;;
    *) echo "$0: unknown case '$1' (cases: $all_cases)" >&2; return 2 ;;
  esac
}

mkdir -p "$dir"
data=$dir/licenses_bytes
if [ "${SKIP_RUNS:-0}" != 1 ] && [ ! -s "$data.idx" ]; then
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin" preprocess --input /usr/share/common-licenses/* --tokenizer bytes \
    --output-prefix "$data"
fi
cat > "$dir/long_context.toml" <<TOML
[model]
n_layers = 2
d_model = 128
n_heads = 4
n_kv_heads = 4
vocab_size = 257
max_seq_len = $seq
norm = "rmsnorm"
position = "rope"
activation = "swiglu"
bias = false
tie_embeddings = false
[train]
seq_len = $seq
micro_batch_size = 1
global_batch_size = 1
[optimizer]
lr = 1e-3
[data]
train = "$data"
TOML
base_args=(--config "$dir/long_context.toml")
global_batch=1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; flags:" \
  "$(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile|fma)$' | xargs)"
source bench/run_cases.sh

/usr/bin/python3 - "$dir" "$warmup" "$all_cases" "$seq" "$budget" <<'PY'
import statistics, sys

sys.path.insert(0, "bench")
from run_summary import load_runs

d, warm, order, seq, budget = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4]), float(sys.argv[5])
keys = ("step_time_ms", "compute_ms", "cp_comm_ms", "cp_exposed_ms", "tokens_per_s")
rows = load_runs(d, warm, keys)
if not rows:
    sys.exit(f"no metrics files in {d}")
MiB = 1 << 20
print(f"\nseq {seq}: median over runs of each run's mean over steps > {warm}; times in ms, memory per rank")
print(f"{'case':<9} {'runs':>4} {'step':>8} {'vs cp1':>7} {'cp comm':>8} {'exposed':>8} {'exp/comm':>8} "
      f"{'exp/step':>8} {'activations MiB':>15} {'vs cp1':>7} {'peak RSS MiB':>12}")
base = None
for case in [c for c in order if c in rows]:
    rs = rows[case]
    s = {k: statistics.median([r[k] for r in rs]) for k in keys}
    act = rs[0]["memory"]["activations"]
    if case == "cp1":
        base = (s["step_time_ms"], act)
    comm = s["cp_comm_ms"]
    print(f"{case:<9} {len(rs):>4} {s['step_time_ms']:>8.0f} "
          f"{(base[0] / s['step_time_ms'] if base else float('nan')):>6.2f}x {comm:>8.0f} {s['cp_exposed_ms']:>8.0f} "
          f"{(100 * s['cp_exposed_ms'] / comm if comm else 0):>7.1f}% {100 * s['cp_exposed_ms'] / s['step_time_ms']:>7.1f}% "
          f"{act / MiB:>15.1f} {(act / base[1] if base else float('nan')):>6.3f}x "
          f"{rs[0]['memory'].get('peak_rss', 0) / MiB:>12.0f}")
    print(f"{'':<9} per-run step ms: " + ", ".join(f"{r['step_time_ms']:.0f}" for r in rs))
print("losses (first run of each case): " + "; ".join(
    f"{c}: " + " ".join(f"{x:.4f}" for x in rows[c][0]["loss"]) for c in order if c in rows))
for case in ("cp1", "cp4_ring", "cp4_a2a"):
    if case in rows:
        per_token = rows[case][0]["memory"]["activations"] / seq
        print(f"largest sequence whose activations fit {budget:.0f} MiB per rank at {case}: "
              f"{int(budget * MiB / per_token):,} tokens ({per_token / 1024:.1f} KiB per token of the sequence)")
PY
