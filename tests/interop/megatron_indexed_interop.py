#!/usr/bin/python3
"""Checks that megatrain's Megatron indexed datasets (PREFIX.bin + PREFIX.idx) interoperate with
Megatron-Core's own megatron/core/datasets/indexed_dataset.py, both ways:

  (a) Megatron-Core writes (IndexedDatasetBuilder: add_item + end_document and add_document, dtype
      numpy.uint16 and numpy.int32) -> `megatrain data inspect` reads: dtype, document, sequence
      and token counts, and every token of every document;
  (b) `megatrain preprocess` writes (the bytes tokenizer -> uint16; a byte-level tokenizer.json
      with ids >= 65536 -> int32) -> Megatron-Core's IndexedDataset reads: dtype, document_indices,
      sequence_lengths, sequence_pointers and every token, against ids computed here from the
      input text and against `megatrain data inspect`; and Megatron-Core's builder, given the same
      ids, writes byte-identical .bin and .idx files.

Independent: the reader and writer on the other side are NVIDIA's, from the megatron-core package
pinned in scripts/requirements-ref-nodeps.txt (or a Megatron-LM checkout, see below).

Usage:
  python3 megatron_indexed_interop.py MEGATRAIN_BIN SCRATCH_DIR
(ctest runs it as `megatron_interop` with MEGATRAIN_REF_PYTHON, the venv scripts/setup.sh makes.)
Needs numpy, torch (Debian's python3-torch) and megatron-core in that interpreter;
MEGATRON_LM_DIR=/path/to/Megatron-LM takes megatron/core from that checkout instead. Only the
dataset modules are imported: the package's megatron/core/__init__.py loads its distributed training
stack, which needs a newer torch than Debian's. Exit status: 0 all equal; 1 a mismatch, a failing
command or a missing reference (the message says what differs, or what to install).
Work files go to SCRATCH_DIR/work, which is removed first and kept after a failure.
"""
import importlib
import os
import re
import shutil
import subprocess
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from gpt2_bytes import byte_to_unicode  # noqa: E402
from megatron_roots import megatron_roots  # noqa: E402


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def first_diff(a, b):
    """Index of the first differing element of two sequences (or the shorter length)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check_ids(got, want, what):
    got, want = [int(x) for x in got], [int(x) for x in want]
    if got != want:
        i = first_diff(got, want)
        raise Mismatch(
            f"{what}: {len(got)} tokens, expected {len(want)}; first difference at token {i}: "
            f"got {got[i:i + 8]}, expected {want[i:i + 8]}"
        )


# ------------------------------------------------------------------------------------------------
# megatrain side (its CLI)

class Megatrain:
    def __init__(self, binary):
        self.binary = binary

    def run(self, *args):
        r = subprocess.run([self.binary, *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise Mismatch(
                f"`megatrain {' '.join(args)}` exited {r.returncode}:\n{r.stdout}{r.stderr}"
            )
        return r.stdout

    def inspect(self, prefix):
        """(documents, sequences, tokens, dtype name) as `data inspect` prints them."""
        out = self.run("data", "inspect", prefix)
        m = re.search(r": (\d+) documents, (\d+) sequences, (\d+) tokens, dtype (\w+)$", out, re.M)
        check(m, f"unexpected `megatrain data inspect {prefix}` output: {out!r}")
        return int(m[1]), int(m[2]), int(m[3]), m[4]

    def document(self, prefix, d):
        """Token ids of document d as `data inspect --doc d` prints them."""
        out = self.run("data", "inspect", prefix, "--doc", str(d))
        m = re.search(r"^document (\d+) \((\d+) tokens\):(.*)$", out, re.M)
        check(m and int(m[1]) == d, f"unexpected `megatrain data inspect --doc {d}` output: {out!r}")
        ids = [int(t) for t in m[3].split()]
        check(len(ids) == int(m[2]), f"document {d}: megatrain says {m[2]} tokens, prints {len(ids)}")
        return ids


# ------------------------------------------------------------------------------------------------
# (a) Megatron-Core writes, megatrain reads

MEGATRAIN_DTYPE_NAME = {"uint16": "u16", "int32": "i32"}


def megatron_documents(numpy, dtype):
    """Documents as lists of sequences (lists of ids), with how each is added to the builder."""
    rng = numpy.random.RandomState(1234 if dtype == numpy.uint16 else 4321)
    top = 65535 if dtype == numpy.uint16 else 2**31 - 1
    rand = lambda n: rng.randint(0, top, size=n, dtype=numpy.int64).tolist()  # noqa: E731
    docs = [
        ("add_item", [[7]]),                                   # a 1-token document
        ("add_item", [rand(5), rand(1), rand(300)]),           # several sequences
        ("add_document", [rand(3), rand(17), rand(2)]),        # add_document(tensor, lengths)
        ("add_item", [[0, top, 1, top - 1, 256, 255]]),        # extreme ids of the dtype
        ("add_item", []),                                      # an empty document
        ("add_item", [rand(4), [], rand(2)]),                  # a 0-length sequence inside
        ("add_document", [rand(70000)]),                       # > 65536 tokens: big pointers
        ("add_item", [rand(n) for n in (1, 2, 3, 5, 8, 13)]),
        ("add_document", [rand(999)]),
        ("add_item", [rand(65537), rand(3)]),                  # pointers past 2^17 bytes
    ]
    if dtype == numpy.int32:
        docs.append(("add_item", [[65535, 65536, 70000, 16777216, 2**31 - 1]]))
    return docs


def direction_a(numpy, torch, mi, mt, work):
    summary = []
    for dtype in (numpy.uint16, numpy.int32):
        prefix = os.path.join(work, f"megatron_{dtype.__name__}")
        docs = megatron_documents(numpy, dtype)
        builder = mi.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for how, seqs in docs:
            if how == "add_item":
                for s in seqs:
                    builder.add_item(torch.tensor(s, dtype=torch.int64))
                builder.end_document()
            else:
                flat = [t for s in seqs for t in s]
                builder.add_document(torch.tensor(flat, dtype=torch.int64), [len(s) for s in seqs])
        builder.finalize(prefix + ".idx")

        want_docs = [[t for s in seqs for t in s] for _, seqs in docs]
        n_seq = sum(len(seqs) for _, seqs in docs)
        n_tok = sum(len(d) for d in want_docs)

        # Megatron-Core reads its own file as expected (guards the test's own expectations).
        ds = mi.IndexedDataset(prefix)
        check(ds.index.dtype == dtype, f"{prefix}: Megatron-Core reads dtype {ds.index.dtype}")
        check(len(ds) == n_seq, f"{prefix}: Megatron-Core reads {len(ds)} sequences, wrote {n_seq}")

        name = MEGATRAIN_DTYPE_NAME[dtype.__name__]
        got = mt.inspect(prefix)
        check(
            got == (len(docs), n_seq, n_tok, name),
            f"(a) {prefix}: megatrain reads (documents, sequences, tokens, dtype) = {got}, "
            f"Megatron-Core wrote {(len(docs), n_seq, n_tok, name)}",
        )
        for d, want in enumerate(want_docs):
            check_ids(mt.document(prefix, d), want, f"(a) {prefix} document {d} read by megatrain")
        summary.append(
            f"(a) Megatron-Core {dtype.__name__} -> megatrain: {len(docs)} documents, {n_seq} "
            f"sequences, {n_tok} tokens equal (dtype {name})"
        )
    return summary


# ------------------------------------------------------------------------------------------------
# (b) megatrain writes, Megatron-Core reads

BIG_BYTE_BASE = 66000  # byte b has id BIG_BYTE_BASE + b in the wide tokenizer
BIG_EOD = 70000


def write_wide_tokenizer(path):
    """A byte-level BPE tokenizer.json without merges whose ids are all >= 65536, so megatrain
    must write int32 tokens: byte b -> 66000 + b, <|endoftext|> -> 70000 (vocab size 70001)."""
    import json

    vocab = {sym: BIG_BYTE_BASE + b for b, sym in byte_to_unicode().items()}
    tok = {
        "version": "1.0",
        "added_tokens": [{"id": BIG_EOD, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": []},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def input_documents(numpy):
    """Texts of the documents written by `megatrain preprocess` (one input file each)."""
    rng = numpy.random.RandomState(99)
    words = ["the", "data", "Megatron", "token", "héllo", "naïve", "日本語", "ünïcödé", "42", "\t",
             "x", "—", "emoji🙂", "", "end."]
    def text(n_words):
        parts = [words[i] for i in rng.randint(0, len(words), size=n_words)]
        return "".join(p + (" " if k % 11 else "\n") for k, p in enumerate(parts))
    big = ""
    while len(big.encode()) <= 70000:
        big += text(500)
    return [
        "hello, world\n",
        "x",                                          # 1 byte -> 2 tokens (byte + EOD)
        "Grüße, 世界! ☃\r\nsecond line\twith tab\n",
        big,                                          # > 65536 tokens
        text(40),
        "no final newline",
        text(3000),
    ]


def direction_b(numpy, mi, mt, work):
    texts = input_documents(numpy)
    inputs = []
    for i, t in enumerate(texts):
        path = os.path.join(work, f"doc{i}.txt")
        with open(path, "wb") as f:
            f.write(t.encode("utf-8"))
        inputs.append(path)
    wide = os.path.join(work, "wide_tokenizer.json")
    write_wide_tokenizer(wide)

    cases = [
        ("bytes", numpy.uint16, lambda data: list(data) + [256]),
        (wide, numpy.int32, lambda data: [BIG_BYTE_BASE + b for b in data] + [BIG_EOD]),
    ]
    summary = []
    for tokenizer, dtype, encode in cases:
        label = "bytes" if tokenizer == "bytes" else "wide tokenizer.json"
        prefix = os.path.join(work, f"megatrain_{dtype.__name__}")
        mt.run("preprocess", "--input", *inputs, "--tokenizer", tokenizer, "--output-prefix", prefix)
        want = [encode(t.encode("utf-8")) for t in texts]
        lengths = [len(w) for w in want]
        itemsize = numpy.dtype(dtype).itemsize

        ds = mi.IndexedDataset(prefix)
        what = f"(b) {prefix} ({label}) read by Megatron-Core"
        check(ds.index.dtype == dtype, f"{what}: dtype {ds.index.dtype.__name__}, expected "
                                       f"{dtype.__name__}")
        check(len(ds) == len(texts), f"{what}: {len(ds)} sequences, expected {len(texts)}")
        check_ids(ds.document_indices, list(range(len(texts) + 1)), f"{what}: document_indices")
        check_ids(ds.sequence_lengths, lengths, f"{what}: sequence_lengths")
        pointers = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]) * itemsize
        check_ids(ds.index.sequence_pointers, pointers, f"{what}: sequence_pointers")
        got_docs, got_seqs, got_toks, got_dtype = mt.inspect(prefix)
        check((got_docs, got_seqs, got_toks) == (len(texts), len(texts), sum(lengths)),
              f"(b) {prefix}: megatrain reports {(got_docs, got_seqs, got_toks)}")
        for d, w in enumerate(want):
            s, e = ds.document_indices[d], ds.document_indices[d + 1]
            megatron_ids = numpy.concatenate([ds[int(i)] for i in range(s, e)])
            check_ids(megatron_ids, w, f"{what}: document {d} vs the ids of its text")
            check_ids(megatron_ids, mt.document(prefix, d),
                      f"{what}: document {d} vs `megatrain data inspect --doc {d}`")
        # Byte identity: Megatron-Core's builder, given the same ids, writes the same two files.
        ref = os.path.join(work, f"reference_{dtype.__name__}")
        builder = mi.IndexedDatasetBuilder(ref + ".bin", dtype=dtype)
        for w in want:
            builder.add_document(numpy.array(w, dtype=numpy.int64), [len(w)])
        builder.finalize(ref + ".idx")
        for ext in (".bin", ".idx"):
            with open(prefix + ext, "rb") as f:
                ours = f.read()
            with open(ref + ext, "rb") as f:
                theirs = f.read()
            if ours != theirs:
                i = first_diff(ours, theirs)
                raise Mismatch(
                    f"(b) {prefix}{ext} ({len(ours)} bytes) differs from Megatron-Core's writer "
                    f"({len(theirs)} bytes) at byte {i}: megatrain {ours[i:i + 16].hex()}, "
                    f"Megatron-Core {theirs[i:i + 16].hex()}"
                )
        summary.append(
            f"(b) megatrain preprocess ({label}) -> Megatron-Core: {len(texts)} documents, "
            f"{sum(lengths)} tokens equal (dtype {dtype.__name__}), .bin/.idx byte-identical to "
            f"Megatron-Core's writer"
        )
    return summary


def import_indexed_dataset():
    """megatron.core.datasets.indexed_dataset and where it came from: MEGATRON_LM_DIR's megatron/core
    when set, else the installed megatron-core package's. The packages `megatron` and `megatron.core`
    are registered as their folders without running megatron/core/__init__.py (it imports the
    distributed training stack, e.g. torch.distributed._coalescing_manager, absent from Debian's
    torch 1.13); parallel_state is imported first, as that __init__ does, because it and
    megatron.core.utils import each other."""
    roots, origin = megatron_roots()
    found = [r for r in roots
             if os.path.isfile(os.path.join(r, "core", "datasets", "indexed_dataset.py"))]
    if not found:
        raise ImportError(f"no megatron/core/datasets/indexed_dataset.py in {origin}")
    for name, path in (("megatron", found[0]), ("megatron.core", os.path.join(found[0], "core"))):
        package = types.ModuleType(name)
        package.__path__ = [path]
        sys.modules[name] = package
    importlib.import_module("megatron.core.parallel_state")
    return importlib.import_module("megatron.core.datasets.indexed_dataset"), origin


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 1
    binary, scratch = os.path.abspath(argv[1]), os.path.abspath(argv[2])

    try:
        import numpy
        import torch
        mi, origin = import_indexed_dataset()
    except Exception as e:  # noqa: BLE001 -- any import failure means the reference is missing
        print(f"FAIL: the reference is missing: cannot import numpy, torch and "
              f"megatron.core.datasets.indexed_dataset with {sys.executable}: "
              f"{type(e).__name__}: {e}\nRun scripts/setup.sh (Debian's python3-torch; megatron-core "
              f"into build/pyref), or set MEGATRON_LM_DIR to a Megatron-LM checkout.")
        return 1
    if not os.access(binary, os.X_OK):
        print(f"FAIL: megatrain binary {binary} is not an executable file")
        return 1

    work = os.path.join(scratch, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    print(f"Megatron-Core: {origin} ({mi.__file__}); numpy {numpy.__version__}, "
          f"torch {torch.__version__}")
    try:
        lines = direction_a(numpy, torch, mi, Megatrain(binary), work)
        lines += direction_b(numpy, mi, Megatrain(binary), work)
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    for line in lines:
        print(line)
    print("OK: megatrain and Megatron-Core indexed datasets agree in both directions")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
