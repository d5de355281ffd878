#!/usr/bin/env bash
# Builds a JSONL corpus ({"text": ...} per line, one document per source file) holding at least
# MB megabytes (default 100; 1 MB = 10^6 bytes) of document text, from text that Debian packages
# ship on this machine, for bench/preprocess_throughput.sh:
#   bench/make_debian_corpus.sh OUT.jsonl [MB]
# Sources, each a list of sorted paths: /usr/share/doc/*/copyright and changelogs (.gz
# decompressed), /usr/share/man roff sources (decompressed), /usr/share/common-licenses,
# /usr/share/perl (.pm, .pod) and the Python standard library (/usr/lib/python3*/**/*.py).
# Documents are taken round-robin from the five lists (so every kind of text is in the first
# megabytes) until MB megabytes of text are written. Symbolic links, files that are not valid
# UTF-8, empty files and exact duplicates are skipped. If the unique text is smaller than MB the
# script says so on stderr and repeats it. The output is the same on every run on one machine.
# Needs /usr/bin/python3 (scripts/setup.sh installs it).
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 OUT.jsonl [MB]" >&2; exit 2; }
out=$1
mb=${2:-100}
[[ "$mb" =~ ^[0-9]+$ ]] && [ "$mb" -gt 0 ] || { echo "$0: MB must be a positive integer" >&2; exit 2; }

/usr/bin/python3 - "$out" "$mb" <<'PY'
import glob, gzip, hashlib, json, os, sys

out_path, target = sys.argv[1], int(sys.argv[2]) * 1_000_000


def files(pattern, name_ok=lambda p: True):
    """Sorted regular files (no symlinks) matching a recursive glob."""
    return sorted(p for p in glob.glob(pattern, recursive=True)
                  if name_ok(p) and os.path.isfile(p) and not os.path.islink(p))


doc_name = lambda p: os.path.basename(p) == "copyright" or os.path.basename(p).startswith("changelog")
sources = [
    files("/usr/share/doc/**/*", doc_name),
    files("/usr/share/man/**/*"),
    files("/usr/share/common-licenses/*"),
    files("/usr/share/perl/**/*", lambda p: p.endswith((".pm", ".pod"))),
    files("/usr/lib/python3*/**/*.py"),
]


def read_text(path):
    """The file's text (gunzipped if .gz), or None if unreadable, empty or not UTF-8."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return text if text.strip() else None


def documents():
    """Round-robin over the source lists, unique documents only."""
    seen = set()
    cursors = [iter(s) for s in sources]
    while cursors:
        for it in list(cursors):
            path = next(it, None)
            if path is None:
                cursors.remove(it)
                continue
            text = read_text(path)
            if text is None:
                continue
            digest = hashlib.sha1(text.encode()).digest()
            if digest in seen:
                continue
            seen.add(digest)
            yield json.dumps({"text": text}, ensure_ascii=False) + "\n", len(text.encode())


written = docs = passes = jsonl = 0
with open(out_path, "w", encoding="utf-8") as out:
    while written < target:
        passes += 1
        unique = 0
        for line, n in documents():
            out.write(line)
            jsonl += len(line.encode())
            written += n
            unique += n
            docs += 1
            if written >= target:
                break
        if unique == 0:
            sys.exit("make_debian_corpus: no usable text found")
        if written < target:
            print(f"make_debian_corpus: the unique text is only {unique / 1e6:.1f} MB; repeating it",
                  file=sys.stderr)
print(f"make_debian_corpus: {out_path}: {docs} documents, {written / 1e6:.1f} MB of text"
      f" ({jsonl / 1e6:.1f} MB of JSONL)"
      f"{'' if passes == 1 else f', unique text repeated ({passes} passes)'}")
PY
