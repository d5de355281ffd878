"""What the reference scripts share: a failed check, a command that must succeed, and the set-up of the
scripts that train megatrain on a repeated line of text."""
import argparse
import os
import shutil
import subprocess


class Mismatch(Exception):
    """A difference from the reference, or a command that failed; the message says which."""


def run(*cmd):
    """Runs cmd; its stdout, or Mismatch naming the command, its exit status and its output."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise Mismatch(f"`{' '.join(map(str, cmd))}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def text_run_args(doc):
    """--megatrain BIN --out DIR parsed (the description: DOC's first paragraph), DIR made empty and absolute."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--megatrain", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.out = os.path.abspath(args.out)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    return args


def preprocess_text(args, text):
    """TEXT written to DIR/text.txt and preprocessed; its dataset prefix, DIR/text."""
    path = os.path.join(args.out, "text.txt")
    with open(path, "w") as f:
        f.write(text)
    prefix = os.path.join(args.out, "text")
    run(args.megatrain, "preprocess", "--input", path, "--output-prefix", prefix)
    return prefix
