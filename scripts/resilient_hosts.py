"""The compute hosts of scripts/megatrain-resilient --hosts: which are in use, which were left out (lost, or
failing a self-check) and since when, how a launch command is placed on those in use, and the probes
that readmit a lost host once it passes `megatrain selfcheck` again (while the job runs, and at a
relaunch for a host not probed yet); when the job has finished, a left-out host's memory snapshots of
the run are removed."""
import os
import re
import signal
import subprocess
import tempfile
import threading
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


def run_bounded(cmd, timeout_s, stop=None):
    """Runs cmd in its own process group: (exit code, its output); the code is None, and the group
    killed, when it has not ended within timeout_s or `stop` (a threading.Event) was set."""
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline, code = time.time() + timeout_s, None
        while code is None and time.time() < deadline and not (stop and stop.is_set()):
            try:
                code = proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out.seek(0)
        return code, out.read()


def placed_on(cmd, hosts):
    """{hosts} and {np} in the command become `hosts` and their slots."""
    spec, np_ = host_list(hosts), str(sum(hosts.values()))
    return [c.replace("{hosts}", spec).replace("{np}", np_) for c in cmd]


def selfcheck_on(launcher, hosts, run_dir, timeout_s, stop=None):
    """`megatrain selfcheck --run-dir RUN_DIR` with the job's launcher (the command up to the binary)
    placed on `hosts`: its exit code; None when it has not ended within timeout_s or `stop` was set."""
    return run_bounded(placed_on(launcher, hosts) + ["selfcheck", "--run-dir", run_dir], timeout_s, stop)[0]


class HostPool:
    def __init__(self, spec, event):
        self.hosts = parse_hosts(spec)  # HOST -> slots, in order; {} without --hosts
        self.bad = set()  # failed a self-check, or lost (with --hosts)
        self.excluded_at = {}  # HOST -> when it was found lost
        self.probed = {}  # HOST -> (when, passed) of its last probe since it was lost
        self.event = event  # the driver's event(name, **fields)

    def left(self):
        return {h: s for h, s in self.hosts.items() if h not in self.bad}

    def placed(self, cmd):
        """With --hosts: the command placed on the hosts not excluded."""
        return placed_on(cmd, self.left()) if self.hosts else cmd

    def exclude_lost(self, lost_daemons, lost_ranks, stale_hosts, cut_off):
        """With --hosts: a host is lost when the launcher lost its daemon, when every one of its ranks died
        by a signal, when the heartbeats of all its ranks went stale, or when `megatrain diagnose` finds it
        cut off from the network after a hang (cut_off(): those hosts). Lost hosts are left out of the next
        launches."""
        if not self.hosts:
            return
        why = {h: "the launcher lost its daemon" for h in lost_daemons}
        dead = {}
        for _, _, node in lost_ranks:
            dead[node] = dead.get(node, 0) + 1
        why.update({h: f"all {n} of its ranks died by a signal" for h, n in dead.items() if n >= self.hosts.get(h, 1 << 30)})
        why.update({h: "the heartbeats of all its ranks went stale" for h in stale_hosts})
        why.update({h: "cut off from the network (megatrain diagnose)" for h in cut_off()})
        for host, reason in sorted(why.items()):
            self.exclude(host, reason)

    def exclude(self, host, reason):
        if host in self.hosts and host not in self.bad:
            self.bad.add(host)
            self.excluded_at[host] = time.time()
            self.probed.pop(host, None)
            self.event("HOST_EXCLUDED", node_host=host, reason=reason, hosts_left=host_list(self.left()))

    def exclude_unstartable(self, launcher, run_dir, timeout_s):
        """With --hosts, after a launch that failed before any rank started: each host in use is tried alone
        with `megatrain selfcheck` (HOST_CHECKED); those that fail, or do not pass within timeout_s, while
        another passes are left out — a host gone since the last launch, whose daemon never connected back
        (the launcher names no host then). When none passes the cause is not a host: none is left out."""
        if len(self.left()) < 2:
            return
        failed = []
        for host, slots in self.left().items():
            code = selfcheck_on(launcher, {host: slots}, os.path.join(run_dir, "probe", host), timeout_s)
            self.event("HOST_CHECKED", node_host=host, code=code if code is not None else "timeout")
            if code != 0:
                failed.append(host)
        if len(failed) < len(self.left()):
            for host in failed:
                self.exclude(host, "no rank of the launch started, and `megatrain selfcheck` failed on it alone")

    def due(self, after_s):
        """The excluded hosts lost at least after_s ago (one lost just now is not back yet)."""
        t = time.time() - after_s
        return sorted(h for h in self.bad if h in self.hosts and self.excluded_at.get(h, 0) <= t)

    def run_probe(self, launcher, run_dir, host, timeout_s, stop=None):
        """`megatrain selfcheck` with the job's launcher (the command up to the binary) on `host` beside
        the first host in use, so that the link between them is checked too: its exit code; None when it
        has not ended within timeout_s or `stop` was set."""
        pair = {**dict(list(self.left().items())[:1]), host: self.hosts[host]}
        return selfcheck_on(launcher, pair, os.path.join(run_dir, "probe", host), timeout_s, stop)

    def forget_memory(self, launcher, root, timeout_s):
        """When the job has finished: on each host left out, which no rank of the job cleared, `megatrain
        checkpoint forget-memory ROOT` removes its memory snapshots of the run (MEMORY_FORGOTTEN; a host
        still gone or failing: MEMORY_LEFT, its snapshots stay until it reboots or someone runs that)."""
        for host in sorted(h for h in self.bad if h in self.hosts):
            code, out = run_bounded(placed_on(launcher, {host: 1}) + ["checkpoint", "forget-memory", root], timeout_s)
            said = out.strip().splitlines()[-1] if out.strip() else ""
            if code == 0:
                self.event("MEMORY_FORGOTTEN", node_host=host, said=said)
            else:
                self.event("MEMORY_LEFT", node_host=host, code=code if code is not None else "timeout", said=said)

    def record(self, host, code):
        self.probed[host] = (time.time(), code == 0)
        if code == 0:
            self.event("HOST_PROBE_PASSED", node_host=host)
        else:
            self.event("HOST_PROBE_FAILED", node_host=host, code=code if code is not None else "timeout")

    def start_probing(self, launcher, run_dir, after_s, every_s, timeout_s):
        """While a job runs: each host due (after_s) is probed, again every_s after a probe that failed,
        so that a host that came back is known before the next relaunch, which then readmits it at no
        cost (probe()). Returns the function that stops the probing (an unfinished probe is killed and
        counts for nothing); call it when the job has ended."""
        stop = threading.Event()

        def loop():
            while not stop.wait(0.5):
                for host in self.due(after_s):
                    last = self.probed.get(host)
                    if last and (last[1] or time.time() - last[0] < every_s):
                        continue
                    code = self.run_probe(launcher, run_dir, host, timeout_s, stop)
                    if stop.is_set():
                        return
                    self.record(host, code)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()

        def finish():
            stop.set()
            thread.join()
        return finish

    def probe(self, launcher, run_dir, after_s, timeout_s):
        """Before a relaunch: each host due (after_s) that passed a probe since it was lost is used again
        (HOST_READMITTED); one not probed since is probed now, and used again if it passes within
        timeout_s; one whose last probe failed waits for the next (start_probing)."""
        for host in self.due(after_s):
            if host not in self.probed:
                self.record(host, self.run_probe(launcher, run_dir, host, timeout_s))
            if self.probed[host][1]:
                del self.probed[host]
                self.bad.discard(host)
                self.event("HOST_READMITTED", node_host=host, hosts=host_list(self.left()))
