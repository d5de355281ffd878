#!/usr/bin/env bash
# Single-node Slurm for trying `srun` / `sbatch` launches of megatrain on one machine (Debian 12, root).
#
# Run:   sudo bash scripts/slurm/single_node_setup.sh          # install, configure, start
#        sudo bash scripts/slurm/single_node_setup.sh --stop   # stop the daemons it started
# Then:  srun -n 2 --mpi=pmix build/megatrain train --config FILE   (or: bash tests/e2e/test_srun.sh build/megatrain)
#
# What it does:
#  1. installs Debian's `slurm-wlm` (slurmctld, slurmd, slurm-client, the mpi_pmix plugin) and `munge`
#     with apt-get (nothing else; Open MPI and libpmix2 come from scripts/setup.sh);
#  2. writes /etc/slurm/slurm.conf (backing up an existing one to slurm.conf.bak) for ONE node — this
#     host, with the CPU count and memory `slurmd -C` reports — one partition `debug`, daemons running as
#     root, no cgroups (proctrack/linuxproc, task/none), no accounting, MpiDefault=pmix (Open MPI 4.1
#     here talks PMIx to srun; `srun --mpi=list` shows pmix and pmi2);
#  3. starts munged (as user munge), slurmctld and slurmd as plain background daemons (no systemd, so it
#     also works in containers), logs in /var/log/slurm/, and waits until `scontrol ping` answers and the
#     node is idle.
# It is a test rig for a workstation or CI container, not a production cluster configuration.
set -euo pipefail

if [[ "${1:-}" == "--stop" ]]; then
  for d in slurmd slurmctld munged; do
    for pid in $(pidof "$d" || true); do kill "$pid" && echo "stopped $d ($pid)"; done
  done
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "run as root (it installs packages and starts daemons)" >&2; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge
fi

host=$(hostname -s)
# "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24152"
node_line=$(slurmd -C | head -n 1)
[[ "$node_line" == NodeName=* ]] || { echo "slurmd -C printed no node line: $node_line" >&2; exit 1; }

mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/slurm
[[ -f /etc/slurm/slurm.conf && ! -f /etc/slurm/slurm.conf.bak ]] && cp /etc/slurm/slurm.conf /etc/slurm/slurm.conf.bak
cat >/etc/slurm/slurm.conf <<EOF
# Written by megatrain scripts/slurm/single_node_setup.sh: one node ($host), daemons as root, no cgroups.
ClusterName=megatrain-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
$node_line State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

# munge: key from the package (created at install); the daemon runs as user munge.
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
if ! pidof munged >/dev/null; then
  if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged
fi
munge -n | unmunge >/dev/null

pidof slurmctld >/dev/null || slurmctld
pidof slurmd >/dev/null || slurmd

for _ in $(seq 1 30); do
  if scontrol ping 2>/dev/null | grep -q UP && sinfo -h -o %t 2>/dev/null | grep -q idle; then
    sinfo
    echo "single-node Slurm is up: try 'srun -n 2 hostname'"
    exit 0
  fi
  sleep 1
done
echo "Slurm did not come up; see /var/log/slurm/slurmctld.log and /var/log/slurm/slurmd.log" >&2
scontrol ping || true
sinfo || true
exit 1
