#!/usr/bin/env bash
# Multi-node Slurm for real: scripts/slurm/simcluster starts munged, slurmctld and one slurmd per
# simulated host (network namespaces, scripts/simhosts), and scripts/slurm/train_multinode.sbatch
# runs on 2 nodes × 1 task through `sbatch`:
#   1. a short run finishes (exit 0): one MPI world of 2 ranks (dp = 2), rank 0 on simhost1 and
#      rank 1 on simhost2 (their heartbeats name the host), all 6 steps logged;
#   2. preemption: the batch script gets SIGUSR1 (what `--signal=B:USR1@300` sends before the time
#      limit) after step 20; the ranks save and exit 10, the script requeues the job, and its second
#      start resumes from that checkpoint and finishes all 300 steps, each step's metrics line once
#      after the resume point.
# Needs root, network namespaces and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh installs them); otherwise prints "SKIPPED: …" and exits 77 (ctest: skipped).
# Run:  bash tests/e2e/test_slurm_multinode.sh build/megatrain   (ctest: slurm_multinode_e2e, label e2e)
set -euo pipefail

bin=$(realpath "${1:?usage: test_slurm_multinode.sh PATH/TO/megatrain}")
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/scripts/slurm/simcluster

[ "$(id -u)" = 0 ] || { echo "SKIPPED: network namespaces and Slurm daemons need root"; exit 77; }
for tool in ip slurmctld slurmd sbatch munged; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge iproute2)"; exit 77; }
done
if ! ip netns add simcluster-probe 2>/dev/null; then echo "SKIPPED: cannot create network namespaces here"; exit 77; fi
ip netns del simcluster-probe

dir=$(mktemp -d "${TMPDIR:-/tmp}/megatrain-slurm.XXXXXX")
export SIMCLUSTER_DIR=$dir/cluster
cleanup() { "$cluster" down >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  # What a crashed rank said first (the signal, the top of its stack), then the end of the output.
  [ -f "${out:-/dev/null}" ] && grep -m 20 -E "error|[Ss]ignal|\] \[ ?[0-8]\]" "$out"  || true
  [ -f "${out:-/dev/null}" ] && tail -30 "$out"
  [ -n "${job:-}" ] && "$cluster" run scontrol show job "$job" 2>&1 | head -20
  tail -20 "$SIMCLUSTER_DIR/log/slurmctld.log" 2>/dev/null
  exit 1
}
"$cluster" up 2

source "$root/tests/tiny_model.sh"
tiny_model "$bin" "$dir" 4 8
submit() {  # submit NAME STEPS: a job of 2 nodes × 1 task; prints its id
  (cd "$root" && "$cluster" run sbatch --parsable -o "$dir/$1.out" --nodes=2 --ntasks-per-node=1 \
    --export=ALL,CONFIG="$dir/tiny.toml",RUN_DIR="$dir/$1",MEGATRAIN_BIN="$bin" \
    scripts/slurm/train_multinode.sbatch --set train.steps="$2" --set checkpoint.save_interval=100)
}
state() { "$cluster" run scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_done() {  # wait_done JOB SECONDS: until COMPLETED (or fail on another end state that lasts 10 s)
  local ended=0 pending=0
  for _ in $(seq 1 "$2"); do
    case "$(state "$1")" in
      COMPLETED) return 0 ;;
      # A job that requeues itself can show its incarnation's end state for a moment before it is
      # pending again (CI saw FAILED right after "DUE TO JOB REQUEUE"): an end state must last.
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)
        ended=$((ended + 1)); pending=0
        [ "$ended" -lt 10 ] || fail "job $1 ended $(state "$1")" ;;
      # A requeued job waits 2 min unless told to start; but not within the second its last
      # incarnation's credential was revoked: slurmd refuses a credential made in that second
      # ("Job credential revoked", CI saw the job fail so), hence 3 s pending first.
      PENDING)
        ended=0; pending=$((pending + 1))
        [ "$pending" -ne 3 ] || "$cluster" run scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 || true ;;
      *) ended=0; pending=0 ;;
    esac
    sleep 1
  done
  fail "job $1 not done in $2 s (state $(state "$1"))"
}

# 1. A short run over two nodes.
job=$(submit short 6)
out=$dir/short.out
wait_done "$job" 120
grep -q "start 1: 2 node(s) \[simhost\[1-2\]\], 2 tasks" "$out" || fail "not 2 nodes × 1 task"
grep -q "dp = 2," "$out" || fail "the 2 tasks did not form one MPI world"
grep -q '"host":"simhost1".*"rank":0' "$dir/short/hb/rank_0.json" || fail "rank 0 not on simhost1"
grep -q '"host":"simhost2".*"rank":1' "$dir/short/hb/rank_1.json" || fail "rank 1 not on simhost2"
[ "$(grep -c '"step_time_ms"' "$dir/short/metrics.jsonl")" = 6 ] || fail "not 6 steps of metrics"
echo "short run: 2 nodes, rank 0 on simhost1, rank 1 on simhost2, 6 steps"

# 2. Preemption: SIGUSR1 to the batch script after step 20, save, exit 10, requeue, resume, finish.
job=$(submit long 300)
out=$dir/long.out
for _ in $(seq 1 120); do grep -q 'step     20/300' "$out" 2>/dev/null && break; sleep 0.5; done
grep -q 'step     20/300' "$out" || fail "no step 20 in 60 s"
"$cluster" run scancel --signal=USR1 --batch "$job"
wait_done "$job" 240
grep -q "stop requested, passing it to the driver" "$out" || fail "the batch script did not get the signal"
grep -q "saved and stopped; requeued" "$out" || fail "no save and requeue (exit 10)"
grep -q "start 2: 2 node(s)" "$out" || fail "the job did not start a second time"
resumed=$(sed -n 's/.*checkpoint: resumed from .*(step \([0-9]*\)).*/\1/p' "$out" | tail -1)
[ -n "$resumed" ] && [ "$resumed" -ge 20 ] && [ "$resumed" -lt 300 ] || fail "no resume from the save after step 20 (got '$resumed')"
grep -q 'step    300/300' "$out" || fail "the requeued job did not finish"
after=$(/usr/bin/python3 -c "import json,sys; s=[json.loads(l)['step'] for l in open(sys.argv[1]) if 'step_time_ms' in l]; t=[x for x in s if x > int(sys.argv[2])]; print('ok' if sorted(t) == list(range(int(sys.argv[2]) + 1, 301)) and len(set(t)) == len(t) else 'bad')" "$dir/long/metrics.jsonl" "$resumed")
[ "$after" = ok ] || fail "steps after $resumed are not each logged once up to 300"
echo "preemption: signalled after step 20, saved at step $resumed, requeued, resumed at $resumed, finished 300"
echo "PASSED: multi-node sbatch on simulated Slurm nodes"
