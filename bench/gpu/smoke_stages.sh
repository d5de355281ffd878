# The --smoke mode of bench/gpu/device_check.sh (sourced after its env stage): the kit on a machine
# with no GPU, no CUDA toolkit and none of the project's packages (scripts/gpu_kit/check_kit.sh runs
# it in a bare Debian root), proving on CPU time what the GPU machine would otherwise find first:
#   ldd       every kit binary and plugin resolves every library (CUDA's from the image's layout)
#   data      megatrain config and preprocess of the kit's corpus
#   mpi       a CPU training run under the kit's own mpirun, 1 and 2 ranks (Open MPI relocated)
#   kernels   kernel_times on the CPU
#   gpu-tests test_device_gpu and test_nccl_cuda exit 77, "no CUDA device" (the CUDA libraries load)
#   refusal   train.device = "cuda" is refused with its usage error (exit 64)
smoke() {
  local name=$1 want=$2 figures=$3
  shift 3
  local t=$(date +%s) rc
  run_boxed 120 "$logs/smoke_$name.log" "$@"
  rc=$?
  local status=FAIL
  [ "$rc" = "$want" ] && status=PASS
  [ "$status" = PASS ] || { fail; figures="exit $rc (want $want): $(grep -v '^\$ ' "$logs/smoke_$name.log" | tail -2 | paste -sd' ' -)"; }
  record "$name" "$status" $(($(date +%s) - t)) "$figures"
}

# ldd of everything ELF in the kit, under its environment: any "not found" fails.
t=$(date +%s)
find "$MEGATRAIN_KIT/libexec" "$MEGATRAIN_KIT/ompi" "$MEGATRAIN_KIT/lib" -type f |
  while read -r f; do head -c4 "$f" | grep -q ELF && echo "$f"; done >"$logs/elves.txt"
unresolved=$(while read -r f; do kit-env ldd "$f" 2>&1 | sed -n "s|^\t*\(.*not found\)|$(basename "$f"): \1|p"; done \
  <"$logs/elves.txt")
if [ -z "$unresolved" ]; then
  record ldd PASS $(($(date +%s) - t)) "$(wc -l <"$logs/elves.txt") ELF files resolve every library"
else
  fail
  record ldd FAIL $(($(date +%s) - t)) "$(echo "$unresolved" | head -3 | paste -sd';' -)"
fi

smoke config 0 "configs/demo.toml resolves" megatrain config --config configs/demo.toml
data=$scratch/fortunes
smoke preprocess 0 "the kit's corpus as bytes" megatrain preprocess --tokenizer bytes --doc-separator % \
  --input "$MEGATRAIN_KIT/data/science" --output-prefix "$data"
tiny=(--config configs/demo.toml --set "data.train=\"$data\"" --set 'data.valid=""' --set model.vocab_size=257
      --set model.n_layers=1 --set model.d_model=64 --set model.n_heads=2 --set train.seq_len=64
      --set train.micro_batch_size=2 --set train.global_batch_size=4 --set train.steps=3 --set optimizer.warmup_steps=1 --set train.eval_interval=0
      --set checkpoint.save_interval=0 --set 'checkpoint.dir=""' --set log.interval=1 --set 'log.metrics_file=""')
smoke "mpi 1 rank" 0 "3 steps on the CPU" mpirun -np 1 -x OMP_NUM_THREADS=1 megatrain train "${tiny[@]}"
smoke "mpi 2 ranks" 0 "3 steps, dp 2" mpirun -np 2 -x OMP_NUM_THREADS=1 megatrain train "${tiny[@]}"
smoke "no mpirun" 0 "a singleton start (Open MPI forks its orted)" megatrain train "${tiny[@]}"
smoke kernels 0 "tiny shapes" kernel_times --device cpu --shape tiny --iters 2
smoke test_device_gpu 77 "skips: no CUDA device" test_device_gpu
smoke test_nccl_cuda 77 "skips under mpirun -np 1" mpirun -np 1 test_nccl_cuda
smoke "cuda refused" 64 "train.device = \"cuda\" is a usage error" megatrain train "${tiny[@]}" --set train.device='"cuda"'
for name in test_device_gpu test_nccl_cuda "cuda refused"; do
  grep -qE 'no CUDA device|train.device = "cuda", but' "$logs/smoke_$name.log" ||
    { fail; record "$name" FAIL 0 "the log does not say why it skipped or refused"; }
done
