#!/usr/bin/env bash
# megatrain beside the current PyTorch on this CPU: the GPT-2 124M step (configs/gpt2_124m.toml's
# shape) at B4 × T64 and B1 × T1024, one process on every core, in one interleaved run.
#   bench/torch_peer.sh [DIR]        (DIR default runs/bench_torch_peer)
# Environment: MEGATRAIN_BIN (build/megatrain), REPS (2), WARMUP (2 steps left out), STEPS (3 timed),
# THREADS (nproc), SHAPES ("4x64 1x1024"), CASES (subset of: mt_fp32 mt_bf16 eager_fp32 eager_bf16
# compile_fp32 compile_bf16), TORCH_VENV (build/torch_peer/venv).
# Cases: megatrain train.precision fp32 and bf16 (build/megatrain train, one rank, OMP_NUM_THREADS =
# THREADS, the bytes dataset of bench/run_cases.sh); PyTorch (bench/torch_peer.py: SDPA attention,
# fused AdamW, clipping) eager and torch.compile, fp32 and bf16 autocast. Every run is its own
# process; repetition r of every case runs before repetition r + 1 of any, so load from other
# processes falls on all cases alike. A run's figure is the median of its timed steps; the table
# gives the median over repetitions, each run's figure beside it, and tokens/s.
# PyTorch comes from PyPI into its own venv (made once): the PyPI wheel is built against CUDA 13 and
# imports only where its CUDA libraries load, so it is installed with --no-deps beside the pure-Python
# dependencies and the four NVIDIA wheels its metadata pins, with /usr/local/cuda/lib64 (the CUDA
# toolkit, scripts/setup.sh) and their lib folders on LD_LIBRARY_PATH; it then runs on the CPU.
# torch.compile needs the C++ compiler (g++). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset.
# On a CPU without AVX512-BF16 or AMX, PyTorch's bf16 matmul is a scalar fallback (0.9 GFLOP/s
# against fp32's 34 on the 2-core AVX2 machine of bench/RESULTS.md): a bf16 autocast step of 124M
# then takes minutes, so leave eager_bf16 and compile_bf16 out of CASES there, or run them alone
# with WARMUP=0 STEPS=1 for the order of magnitude. Each PyTorch run prints its steps on its .log.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEGATRAIN_BIN:-build/megatrain}
dir=${1:-runs/bench_torch_peer}
reps=${REPS:-2}
warmup=${WARMUP:-2}
steps=${STEPS:-3}
threads=${THREADS:-$(nproc)}
shapes=${SHAPES:-"4x64 1x1024"}
cases=${CASES:-"mt_fp32 mt_bf16 eager_fp32 eager_bf16 compile_fp32 compile_bf16"}
venv=${TORCH_VENV:-build/torch_peer/venv}
[ -x "$bin" ] || { echo "$0: $bin not found; build it first (cmake --build build --target megatrain)" >&2; exit 2; }
[ -e /usr/local/cuda/lib64/libcudart.so.13 ] ||
  { echo "$0: /usr/local/cuda/lib64/libcudart.so.13 missing: PyPI's torch loads CUDA 13's runtime (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$dir"

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --no-deps torch==2.15.0 nvidia-cufile==1.20.0.107 nvidia-cusparselt-cu13==0.8.1 \
    nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7 typing_extensions filelock sympy mpmath networkx jinja2 \
    MarkupSafe fsspec numpy
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nvlibs=$(ls -d "$site"/nvidia/*/lib | tr '\n' ':')
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$nvlibs${LD_LIBRARY_PATH:-}
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')

data=$dir/licenses_bytes
bench=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads")
[ -s "$data.idx" ] ||
  "${bench[@]}" "$bin" preprocess --input /usr/share/common-licenses/* --tokenizer bytes --output-prefix "$data" >/dev/null

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
echo "megatrain $(git rev-parse --short HEAD), PyTorch $torch_version, $threads threads, $reps repetitions of $warmup + $steps steps"
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo ||
  echo "no AVX512-BF16 or AMX: bf16 runs by conversion (megatrain: 16-bit roundings into the float32 GEMM; PyTorch: its scalar bf16 matmul)"

for rep in $(seq 1 "$reps"); do
  for shape in $shapes; do
    b=${shape%x*} t=${shape#*x}
    for c in $cases; do
      run=$dir/${c}_${shape}_r$rep
      echo "== $c $shape rep $rep $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
      case $c in
        mt_*)
          rm -f "$run.jsonl"
          "${bench[@]}" "$bin" train --config configs/gpt2_124m.toml --set data.train="\"$data\"" \
            --set train.seq_len="$t" --set train.micro_batch_size="$b" --set train.global_batch_size="$b" \
            --set train.precision="${c#mt_}" --set train.steps=$((warmup + steps)) --set train.eval_interval=0 \
            --set optimizer.warmup_steps=1 --set checkpoint.dir='""' --set checkpoint.save_interval=0 \
            --set checkpoint.load='""' \
            --set log.interval=1 --set log.peak_tflops=0 --set log.metrics_file="\"$run.jsonl\"" > "$run.log" 2>&1 ||
            { echo "$0: $c failed; see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; } ;;
        eager_*|compile_*)
          "${bench[@]}" "$venv/bin/python" bench/torch_peer.py --mode "${c%_*}" --precision "${c#*_}" --batch "$b" \
            --seq "$t" --threads "$threads" --warmup "$warmup" --steps "$steps" > "$run.json" 2> "$run.log" ||
            { echo "$0: $c failed; see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; } ;;
        *) echo "$0: unknown case '$c'" >&2; exit 2 ;;
      esac
    done
  done
done

/usr/bin/python3 - "$dir" "$warmup" "$cases" "$shapes" "$torch_version" <<'PY'
import json, pathlib, statistics, sys

d, warm, cases, shapes, tv = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
names = {"mt_fp32": "megatrain fp32", "mt_bf16": "megatrain bf16", "eager_fp32": f"PyTorch {tv} eager fp32",
         "eager_bf16": f"PyTorch {tv} eager bf16 autocast", "compile_fp32": f"PyTorch {tv} torch.compile fp32",
         "compile_bf16": f"PyTorch {tv} torch.compile bf16 autocast"}

def run_ms(c, shape, path):
    if c.startswith("mt_"):
        rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
        return statistics.median(r["step_time_ms"] for r in rows if "step_time_ms" in r and r["step"] > warm)
    return statistics.median(json.loads(path.read_text())["step_ms"])

ms = {}
for c in cases:
    for s in shapes:
        runs = sorted(d.glob(f"{c}_{s}_r*.jsonl" if c.startswith("mt_") else f"{c}_{s}_r*.json"))
        ms[c, s] = [run_ms(c, s, p) for p in runs]
med = {k: statistics.median(v) for k, v in ms.items() if v}
print("\nms per step: median over repetitions (each run: median of its timed steps); tokens/s; each run's figure")
print("| | " + " | ".join(f"B{s.replace('x', ' × T')} ms/step (tokens/s)" for s in shapes) + " |")
print("|---|" + "---|" * len(shapes))
for c in cases:
    cells = []
    for s in shapes:
        if (c, s) not in med:
            cells.append("-")
            continue
        b, t = map(int, s.split("x"))
        cells.append(f"{med[c, s]:.0f} ({b * t / med[c, s] * 1e3:.0f}; runs " + ", ".join(f"{x:.0f}" for x in ms[c, s]) + ")")
    print(f"| {names[c]} | " + " | ".join(cells) + " |")
for s in shapes:
    torch_cases = [c for c in cases if not c.startswith("mt_") and (c, s) in med]
    line = []
    if ("mt_fp32", s) in med and ("mt_bf16", s) in med:
        line.append(f"megatrain bf16 / fp32 tokens/s {med['mt_fp32', s] / med['mt_bf16', s]:.2f}x")
    if torch_cases:
        best = min(torch_cases, key=lambda c: med[c, s])
        for m in ("mt_fp32", "mt_bf16"):
            if (m, s) in med:
                line.append(f"{names[m]} / fastest PyTorch ({names[best]}) {med[best, s] / med[m, s]:.2f}x")
    print(f"B{s.replace('x', ' × T')}: " + "; ".join(line))
PY
