"""The compute hosts of scripts/megatrain-resilient --hosts: which are in use, which were left out (lost, or
failing a self-check) and since when, how a launch command is placed on those in use, and the probe that
readmits a lost host once it passes `megatrain selfcheck` again."""
import os
import re
import signal
import subprocess
import time


def parse_hosts(spec):
    """"h1:2,h2:2" -> {"h1": 2, "h2": 2}; SystemExit naming the bad entry."""
    hosts = {}
    for item in filter(None, spec.split(",")):
        m = re.fullmatch(r"([^:\s]+):([1-9]\d*)", item)
        if not m:
            raise SystemExit(f"megatrain-resilient: --hosts {spec}: '{item}' is not HOST:SLOTS (e.g. node1:8)")
        hosts[m.group(1)] = int(m.group(2))
    return hosts


def host_list(hosts):
    """{"h1": 2} -> "h1:2" (the launcher's --host form)."""
    return ",".join(f"{h}:{s}" for h, s in hosts.items())


def placed_on(cmd, hosts):
    """{hosts} and {np} in the command become `hosts` and their slots."""
    spec, np_ = host_list(hosts), str(sum(hosts.values()))
    return [c.replace("{hosts}", spec).replace("{np}", np_) for c in cmd]


class HostPool:
    def __init__(self, spec, event):
        self.hosts = parse_hosts(spec)  # HOST -> slots, in order; {} without --hosts
        self.bad = set()  # failed a self-check, or lost (with --hosts)
        self.excluded_at = {}  # HOST -> when it was found lost
        self.event = event  # the driver's event(name, **fields)

    def left(self):
        return {h: s for h, s in self.hosts.items() if h not in self.bad}

    def placed(self, cmd):
        """With --hosts: the command placed on the hosts not excluded."""
        return placed_on(cmd, self.left()) if self.hosts else cmd

    def exclude_lost(self, lost_daemons, lost_ranks, stale_hosts, cut_off):
        """With --hosts: a host is lost when the launcher lost its daemon, when every one of its ranks died
        by a signal, when its heartbeats went stale, or when `megatrain diagnose` finds it cut off from the
        network after a hang (cut_off(): those hosts). Lost hosts are left out of the next launches."""
        if not self.hosts:
            return
        why = {h: "the launcher lost its daemon" for h in lost_daemons}
        dead = {}
        for _, _, node in lost_ranks:
            dead[node] = dead.get(node, 0) + 1
        why.update({h: f"all {n} of its ranks died by a signal" for h, n in dead.items() if n >= self.hosts.get(h, 1 << 30)})
        why.update({h: "its heartbeats went stale" for h in stale_hosts})
        why.update({h: "cut off from the network (megatrain diagnose)" for h in cut_off()})
        for host, reason in sorted(why.items()):
            if host in self.hosts and host not in self.bad:
                self.bad.add(host)
                self.excluded_at[host] = time.time()
                self.event("HOST_EXCLUDED", node_host=host, reason=reason, hosts_left=host_list(self.left()))

    def probe(self, launcher, run_dir, after_s, timeout_s):
        """Before a relaunch: each host excluded at least after_s ago (one lost just now is not back yet:
        probing it would only delay the recovery) runs `megatrain selfcheck` with the job's launcher (the
        command up to the binary) beside the first host in use, so that the link between them is checked
        too; one that passes within timeout_s is used again (HOST_READMITTED)."""
        due = time.time() - after_s
        for host in sorted(h for h in self.bad if h in self.hosts and self.excluded_at.get(h, 0) <= due):
            pair = {**dict(list(self.left().items())[:1]), host: self.hosts[host]}
            probe = subprocess.Popen(placed_on(launcher, pair) + ["selfcheck", "--run-dir", os.path.join(run_dir, "probe", host)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                code = probe.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            try:
                os.killpg(probe.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            probe.wait()
            if code == 0:
                self.bad.discard(host)
                self.event("HOST_READMITTED", node_host=host, hosts=host_list(self.left()))
            else:
                self.event("HOST_PROBE_FAILED", node_host=host, code=code if code is not None else "timeout")
