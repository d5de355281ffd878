r"""megatrain's byte-level BPE tokenizer against Hugging Face `tokenizers` and OpenAI's `tiktoken`:
the same text gives the same token ids, on real-sized vocabularies and a varied corpus.

Two tokenizers are trained here by Hugging Face's own BpeTrainer (not by `megatrain tokenizer
train`) on the Debian fortune files and licenses that scripts/setup.sh installs, plus the
generated strings below:
  gpt2    vocab 50 000: the ByteLevel pre-tokenizer with its GPT-2 regex, merges written in the
          legacy "a b" form, <|endoftext|> from the trainer (id 0), then added tokens: special ones
          (one with lstrip, one with rstrip) and non-special ones, some a prefix of another.
  llama3  vocab 32 000: Llama 3's Split regex + ByteLevel without its own regex, merges in the
          ["a", "b"] form and ignore_merges, as Llama 3's tokenizer.json has them; the merge list
          is re-derived from the trained token ranks the way tiktoken-converted vocabularies are
          (every split of a token into two tokens, in the rank order of the token), so tiktoken's
          rank-based BPE and Hugging Face's merge-list BPE give the same ids; Llama 3's special
          tokens after the vocabulary.
  qwen2   vocab 20 000: Qwen2's NFC normalizer and Split regex (single digits) + ByteLevel, ChatML's
          special tokens and a normalized added token; its corpus adds every tenth string
          decomposed (NFD) and strings of combining marks, which NFC must compose as Hugging
          Face's normalizer does.
Every string of the corpus -- the training documents (each fortune, each license paragraph) and
strings generated deterministically here: many scripts, digits, whitespace runs, contractions,
emoji, code, control and unusual code points, added tokens inside text, long words and runs, and
random mixtures of all of these -- is encoded by
  - Hugging Face: `Tokenizer.from_file(the file megatrain reads).encode(s, add_special_tokens=False)`;
  - tiktoken (llama3): `Encoding(pat_str=Llama 3's pattern, mergeable_ranks={token bytes: id},
    special_tokens=...).encode(s, allowed_special="all")`, the token bytes read through the GPT-2
    byte <-> unicode table, built here from its definition;
  - megatrain: `megatrain preprocess --json-key text` (one JSONL line per string, so the whole
    corpus goes through one process; its dataset is read back and each document's trailing
    end-of-document id dropped), and `megatrain tokenize` (one process per string) on a sample;
and the id lists must be identical. `megatrain tokenize --decode` of all the Hugging Face ids of
the corpus must give Hugging Face's `decode(..., skip_special_tokens=False)` of them.

The corpus keeps to characters of Unicode 14 and older: megatrain's \p{L} and \p{N} come from the
system PCRE2's tables (Debian bookworm's 10.42: Unicode 14), Hugging Face's Oniguruma has Unicode 16,
and the 9 272 letters and 120 numbers assigned in between are classified differently by the two.

Why it is independent: the vocabularies, merges, pre-tokenizer settings and expected ids come from
Hugging Face's trainer and encoder and from tiktoken (pinned in scripts/requirements-ref.txt), not
from megatrain's trainer or hand-derived ids; the corpus is not tailored to megatrain's code.

Usage: tokenizer_reference.py MEGATRAIN_BIN OUT_DIR   (ctest: `tokenizer_reference`)
OUT_DIR is emptied first and keeps the tokenizer files and megatrain's inputs and outputs.
Exit status 0: every id list and the decoded text agree; 1: a mismatch (each reported with the
string, both id lists and the first differing position) or a failing command; a missing package
or corpus fails too (scripts/setup.sh installs them). Takes about 30 s on 2 cores.
"""
import glob
import importlib.metadata
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time
import unicodedata

from gpt2_bytes import byte_to_unicode

try:
    import numpy
    import tiktoken
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as e:
    sys.exit(f"tokenizer_reference: {e}; run scripts/setup.sh, which installs the pinned "
             "references of scripts/requirements-ref.txt into build/pyref")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
FORTUNES = "/usr/share/games/fortunes"        # Debian packages fortunes, fortunes-min
LICENSES = "/usr/share/common-licenses"       # Debian package base-files
SAMPLE_TOKENIZE = 4    # strings encoded by `megatrain tokenize`, one process (~0.3 s) each
MAX_REPORTS = 8        # mismatches printed per comparison

# ---------------------------------------------------------------------------------------------
# The corpus.

SENTENCES = [
    "Größenwahn an der Straße; Äpfel, Öl und Übermut.",
    "Ça va ? Déjà vu, naïve façade, cœur et œuvre.",
    "Привет, как дела? Ёжик в тумане съел 3 яблока.",
    "Γειά σου κόσμε· Ἀρχιμήδης εἶπεν «εὕρηκα».",
    "日本語のテキストです。東京タワーは333メートル。",
    "中文测试，你好世界！今天是2024年。",
    "한국어 문장입니다. 서울에서 만나요!",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "नमस्ते दुनिया, यह हिन्दी है।",
    "مرحبا بالعالم، هذا نص عربي ١٢٣.",
    "שלום עולם, זה טקסט בעברית.",
    "Tiếng Việt có dấu: người, được, những.",
    "İstanbul'da ılık bir gün; KIŞ geldi.",
    "Բարեւ աշխարհ, გამარჯობა, ሰላም ለዓለም",
    "வணக்கம் உலகம், হ্যালো বিশ্ব",
    "ﬁnance ﬂow ǅemal ǈubljana ß ẞ ŉ",
    "𝐇𝐞𝐥𝐥𝐨 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝒮𝒸𝓇𝒾𝓅𝓉 𝟙𝟚𝟛",
    "Z̴a̷l̶g̸o̵ t̷e̶x̸t̴ and e\u0301 vs é, n\u0303 vs ñ",
]
EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🇫🇷🇩🇪", "1\ufe0f\u20e3", "❤\ufe0f", "🏳\ufe0f\u200d🌈",
         "🤖🤖🤖", "☃", "✓✗", "🀄", "😀😃😄😁"]
NUMBERS = ["0", "42", "1234567890", "3.14159", "1,000,000", "-17e-3", "0x7fff", "٣٤٥", "०१२३",
           "²³", "½¾", "Ⅻ", "①②", "１２３４", "𝟙𝟚", "12abc34", "v1.2.3", "2024-01-31T12:00:00Z"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\n\n\n", "   \n", " \n ", "\r", "\u00a0",
          "\u2003", "\u3000", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\u200b", "\u180e",
          " \u00a0 ", "\n\u3000\n"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "'VE", "\u2019s",
                "'ſ", "'x", "''", "'", "'''s", "I'm", "don't", "DON'T", "we'll've", "O'Neil's",
                "rock'n'roll", "'sup", "' s", "''ll"]
CODE = ["def f(x):\n    return x**2\n", "{\"a\": [1, 2, {\"b\": null}]}", "<div class=\"x\">&amp;</div>",
        "a->b; i++; j--;", "#include <stdio.h>\nint main(void) { return 0; }\n", "$$\\frac{a}{b}$$",
        "...", "—–-", "«»„“”", "!!!???", "@user #tag", "http://example.com/a?b=c&d=e#f",
        "if (x != y && y >= z) {\n\t\treturn;\n\t}", "SELECT * FROM t WHERE id = 1;",
        "    \n        x = 1\n", "~/.bashrc", "C:\\Windows\\System32", "a_b-c.d/e"]
ODD = ["\x00", "\x01\x02", "\x1b[31mred\x1b[0m", "\x7f", "a\x08a", "\u00ad", "\u200d", "\ufeff",
       "\ufffd", "\uffff", "\ufffe", "\U0010ffff", "\ue000", "\U000f0000", "\u0301", "\u034f",
       "\U0001d11e", "\u2066abc\u2069", "\u0600", "\U000e0001", "ǅ", "\u0345"]


def specials_in_text(tokens):
    """Strings with added tokens inside text: at the ends, adjacent, cut short, in whitespace."""
    out = []
    for t in tokens:
        out += [t, t + t, f"a{t}b", f" {t} ", f"x {t}y", f"{t}\n\n{t}", f"  {t}  ", f"\u3000{t}\u00a0",
                f"\n{t}\t", t[:-1], t[1:], f"{t[:-1]}{t}", f"{t}{t[-1]}", f"<{t}>", f"'s{t}'s"]
    return out


def edge_strings(added):
    """Hand-written cases: every pool item alone and between letters and spaces, long words and
    runs (longer than caches and short paths), and added tokens in text."""
    items = [w for pool in (SENTENCES, EMOJI, NUMBERS, SPACES, CONTRACTIONS, CODE, ODD) for w in pool]
    out = [""]
    for w in items:
        out += [w, f"x{w}y", f" {w}", f"{w} ", f"ab {w} cd", f"{w}{w}"]
    out += ["a" * 300, "ab" * 200, "the" * 100, " " * 5000, "\n" * 1000, " \n" * 500, "\t" * 100 + "x",
            "1" * 1000, "12345678901234567890", "!" * 500, ".,;:" * 100, "😀" * 100, "ß" * 300,
            "Donaudampfschifffahrtsgesellschaftskapitänswitwenrentenversicherungsanstalt",
            "antidisestablishmentarianism" * 3, "x" + " " * 70 + "y", "x" + "\u3000" * 70 + "y"]
    return out + specials_in_text(added)


def random_strings(rng, words, added, count):
    """Random mixtures of training words, the pools above and added tokens."""
    pools = [words, [w for s in SENTENCES for w in s.split()], EMOJI, NUMBERS, SPACES, CONTRACTIONS,
             CODE, ODD, added, list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")]
    out = []
    for _ in range(count):
        sep = rng.choice(["", " ", " ", "\n"])
        out.append(sep.join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 30))))
    return out


def read_utf8(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def training_documents():
    """Each fortune of the fortune files and each paragraph of the licenses, in a fixed order."""
    docs = []
    fortunes = sorted(p for p in glob.glob(f"{FORTUNES}/*")
                      if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat"))
    licenses = sorted(p for p in glob.glob(f"{LICENSES}/*") if os.path.isfile(p) and not os.path.islink(p))
    if len(fortunes) < 20 or not licenses:
        sys.exit(f"tokenizer_reference: {FORTUNES} or {LICENSES} is missing; run scripts/setup.sh "
                 "(Debian packages fortunes, fortunes-min, base-files)")
    for p in fortunes:
        docs += [d for d in re.split(r"^%\n", read_utf8(p), flags=re.M) if d]
    for p in licenses:
        docs += [d for d in read_utf8(p).split("\n\n") if d]
    return docs


# ---------------------------------------------------------------------------------------------
# The tokenizers.

def train(pre_tokenizer, vocab_size, special, texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def make_gpt2(texts, path):
    """GPT-2 style: HF's trainer output, merges rewritten as "a b" strings, added tokens."""
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False), 50000, ["<|endoftext|>"], texts)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                            AddedToken("<eos>", rstrip=True, special=True),
                            AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    tok.add_tokens([AddedToken("<tool>"), AddedToken("<tool_call>"), AddedToken("<|im_start|>assistant"),
                    AddedToken("[PAD]")])
    spec = json.loads(tok.to_str())
    spec["model"]["merges"] = [f"{a} {b}" for a, b in spec["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(spec, ensure_ascii=False))


LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<|reserved_special_token_0|>"]


def make_llama3(texts, path):
    """Llama 3 style: HF's trainer gives the tokens and their ranks (ids); the merges are every
    split of each token into two tokens, ordered by the token's rank, then by the parts' ranks."""
    split = pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False)
    tok = train(pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                32000, [], texts)
    tok.add_special_tokens([AddedToken(t, special=True) for t in LLAMA3_SPECIAL])
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    merges = sorted((vocab[t], vocab[t[:k]], vocab[t[k:]], t[:k], t[k:])
                    for t in vocab for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab)
    spec["model"]["merges"] = [[a, b] for *_, a, b in merges]
    spec["model"]["ignore_merges"] = True
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(spec, ensure_ascii=False))


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def make_qwen2(texts, path):
    """Qwen2/Qwen3 style: the NFC normalizer, Qwen2's split regex, ChatML's special tokens, and one
    added token with normalized=true (matched after NFC; Greek, outside the byte-level alphabet, so
    that Hugging Face's ByteLevel decoder gives its text back rather than bytes of it)."""
    split = pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                  use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=20000, show_progress=False,
                                                       special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_tokens([AddedToken("<think>", normalized=False), AddedToken("καφέ", normalized=True)])
    tok.save(path)


def decomposed(strings):
    """Every tenth string in NFD, and combining marks after letters, NFC's work."""
    marks = ["e\u0301", "a\u0308", "o\u0302\u0301", "\u1100\u1161\u11a8", "n\u0303o", "cafe\u0301 ok", "\u03ba\u03b1\u03c6\u03b5\u0301!",
             "\u0041\u030a\u0301", "x\u0301\u0301"]
    return [unicodedata.normalize("NFD", t) for t in strings[::10]] + [" ".join(marks[i:] + marks[:i])
                                                                      for i in range(len(marks))] + marks


def make_tiktoken(hf):
    """A tiktoken Encoding with the vocabulary of the llama3 tokenizer: token bytes -> id."""
    to_byte = {u: b for b, u in byte_to_unicode().items()}
    added = {t.content for t in hf.get_added_tokens_decoder().values()}
    ranks = {bytes(to_byte[c] for c in t): i for t, i in hf.get_vocab(with_added_tokens=False).items()
             if t not in added}
    special = {t: hf.token_to_id(t) for t in LLAMA3_SPECIAL}
    return tiktoken.Encoding(name="llama3_reference", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                             special_tokens=special)


# ---------------------------------------------------------------------------------------------
# megatrain.

def run(cmd, stdin=b""):
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"tokenizer_reference: `{' '.join(cmd)}` failed with exit code {p.returncode}:\n"
                 f"{p.stderr.decode(errors='replace')}")
    return p.stdout


def megatrain_encode_all(megatrain, tok_path, strings, prefix):
    """Ids of every non-empty string, from one `megatrain preprocess` run (one document per
    string, each ending with the end-of-document id, which is checked and dropped)."""
    with open(prefix + ".jsonl", "w", encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    run([megatrain, "preprocess", "--input", prefix + ".jsonl", "--json-key", "text", "--tokenizer",
         tok_path, "--output-prefix", prefix, "--workers", "2"])
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        sys.exit(f"tokenizer_reference: {prefix}.idx is not a Megatron indexed dataset index")
    dtype = {8: numpy.uint16, 4: numpy.int32}[idx[17]]
    (count,) = struct.unpack_from("<Q", idx, 18)
    sizes = numpy.frombuffer(idx, numpy.int32, count, 34)
    tokens = numpy.fromfile(prefix + ".bin", dtype)
    if count != len(strings) or int(sizes.sum()) != len(tokens):
        sys.exit(f"tokenizer_reference: {prefix}: {count} documents, {int(sizes.sum())} tokens "
                 f"for {len(strings)} strings and {len(tokens)} tokens in .bin")
    docs = numpy.split(tokens.astype(numpy.int64), numpy.cumsum(sizes)[:-1])
    return [d.tolist() for d in docs]


def megatrain_tokenize(megatrain, tok_path, text):
    return [int(x) for x in run([megatrain, "tokenize", "--tokenizer", tok_path], text.encode()).split()]


# ---------------------------------------------------------------------------------------------
# Comparison.

def first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(what, strings, got, want, hf):
    """Counts and reports the strings whose id lists differ (got: megatrain)."""
    bad = 0
    for s, g, w in zip(strings, got, want):
        if g == w:
            continue
        bad += 1
        if bad > MAX_REPORTS:
            continue
        k = first_diff(g, w)
        at = len(hf.decode(w[:k], skip_special_tokens=False)) if k else 0
        lo, hi = max(0, k - 4), k + 8
        print(f"MISMATCH {what}: string of {len(s)} characters{'' if len(s) <= 200 else ' (excerpt)'}: "
              f"{s if len(s) <= 200 else s[max(0, at - 60):at + 100]!r}\n"
              f"  first difference at id {k} (near character {at}); megatrain {len(g)} ids, "
              f"reference {len(w)} ids\n"
              f"  megatrain [{lo}:{hi}]: {g[lo:hi]} {[hf.id_to_token(i) for i in g[lo:hi]]}\n"
              f"  reference [{lo}:{hi}]: {w[lo:hi]} {[hf.id_to_token(i) for i in w[lo:hi]]}")
        if len(g) + len(w) <= 80:
            print(f"  megatrain: {g}\n  reference: {w}")
    if bad:
        print(f"FAIL {what}: {bad} of {len(strings)} strings differ")
    else:
        print(f"ok   {what}: {len(strings)} strings, {sum(map(len, want))} ids identical")
    return bad


def check_decode(what, megatrain, tok_path, hf, id_lists):
    """`megatrain tokenize --decode` of all the ids at once against Hugging Face's decode."""
    ids = [i for lst in id_lists for i in lst]
    got = run([megatrain, "tokenize", "--tokenizer", tok_path, "--decode"], " ".join(map(str, ids)).encode())
    want = hf.decode(ids, skip_special_tokens=False).encode()
    if got == want:
        print(f"ok   {what}: decode of {len(ids)} ids identical ({len(want)} bytes)")
        return 0
    k = first_diff(got, want)
    print(f"MISMATCH {what}: decode differs at byte {k} of {len(want)}: megatrain "
          f"{got[max(0, k - 40):k + 40]!r}, reference {want[max(0, k - 40):k + 40]!r}")
    return 1


def check_tokenizer(name, megatrain, tok_path, eod, strings, sample, out_dir, tik=None):
    hf = Tokenizer.from_file(tok_path)
    eod_id = hf.token_to_id(eod)
    t0 = time.time()
    want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
    t1 = time.time()
    nonempty = [i for i, s in enumerate(strings) if s]
    got_all = megatrain_encode_all(megatrain, tok_path, [strings[i] for i in nonempty],
                                   os.path.join(out_dir, name))
    t2 = time.time()
    got = [[] for _ in strings]
    for i, ids in zip(nonempty, got_all):
        if not ids or ids[-1] != eod_id:
            sys.exit(f"tokenizer_reference: {name}: a preprocessed document does not end with "
                     f"{eod} (id {eod_id})")
        got[i] = ids[:-1]
    print(f"{name}: vocab {hf.get_vocab_size()}; Hugging Face encode {t1 - t0:.1f} s, "
          f"megatrain preprocess {t2 - t1:.1f} s")
    bad = compare(f"{name}: megatrain preprocess vs Hugging Face", strings, got, want, hf)
    got_sample = [megatrain_tokenize(megatrain, tok_path, strings[i]) for i in sample]
    bad += compare(f"{name}: megatrain tokenize vs Hugging Face", [strings[i] for i in sample],
                   got_sample, [want[i] for i in sample], hf)
    bad += check_decode(f"{name}: megatrain tokenize --decode vs Hugging Face", megatrain, tok_path, hf, want)
    if tik is not None:
        t3 = time.time()
        ref = tik.encode_batch(strings, allowed_special="all")
        print(f"{name}: tiktoken encode {time.time() - t3:.1f} s")
        bad += compare(f"{name}: megatrain vs tiktoken", strings, got, ref, hf)
    return bad


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tokenizer_reference.py MEGATRAIN_BIN OUT_DIR")
    megatrain, out_dir = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not os.access(megatrain, os.X_OK):
        sys.exit(f"tokenizer_reference: {megatrain} is not an executable; build megatrain first")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    start = time.time()
    print(f"references: tokenizers {importlib.metadata.version('tokenizers')}, "
          f"tiktoken {importlib.metadata.version('tiktoken')}")

    rng = random.Random(20240611)
    training = training_documents()
    words = sorted({w for d in training[::50] for w in d.split()})
    added = ["<|endoftext|>", "<mask>", "<eos>", "<|im_start|>", "<|im_end|>", "<tool>", "<tool_call>",
             "<|im_start|>assistant", "[PAD]"] + LLAMA3_SPECIAL
    generated = edge_strings(added) + random_strings(rng, words, added, 3000)
    strings = training + generated
    # A handful of every kind of string, one `megatrain tokenize` process each.
    sample = [0, len(training)] + rng.sample(range(len(training) + 1, len(strings)), SAMPLE_TOKENIZE - 2)
    print(f"corpus: {len(training)} training documents ({sum(map(len, training))} characters), "
          f"{len(generated)} generated strings ({sum(map(len, generated))} characters)")

    t0 = time.time()
    gpt2_path, llama3_path = os.path.join(out_dir, "gpt2.json"), os.path.join(out_dir, "llama3.json")
    make_gpt2(training + generated, gpt2_path)
    make_llama3(training + generated, llama3_path)
    qwen2_path = os.path.join(out_dir, "qwen2.json")
    make_qwen2(training + generated, qwen2_path)
    print(f"trained the three tokenizers with Hugging Face's BpeTrainer in {time.time() - t0:.1f} s")

    bad = check_tokenizer("gpt2", megatrain, gpt2_path, "<|endoftext|>", strings, sample, out_dir)
    bad += check_tokenizer("llama3", megatrain, llama3_path, "<|end_of_text|>", strings, sample, out_dir,
                           make_tiktoken(Tokenizer.from_file(llama3_path)))
    bad += check_tokenizer("qwen2", megatrain, qwen2_path, "<|endoftext|>", strings + decomposed(strings), sample,
                           out_dir)
    print(f"{'FAILED' if bad else 'passed'}: {bad} mismatches; {time.time() - start:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
