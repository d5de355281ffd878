"""What the reference scripts share: a failed check, and a command that must succeed."""
import subprocess


class Mismatch(Exception):
    """A difference from the reference, or a command that failed; the message says which."""


def run(*cmd):
    """Runs cmd; its stdout, or Mismatch naming the command, its exit status and its output."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise Mismatch(f"`{' '.join(map(str, cmd))}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout
