"""`megatrain preprocess --format chat` against transformers' apply_chat_template(tokenize=True,
return_assistant_tokens_mask=True): the 50 conversations of chat_template_reference.py (system
prompts, multi-turn, non-ASCII text, some ending on a user turn) and two whose answers begin with a
newline (a token across the learned text's first byte) and one in decomposed accents (NFC), and every document megatrain
writes must be transformers' input_ids followed by EOD, with a loss mask equal to transformers'
assistant_masks followed by 0 (EOD is not learned).

The tokenizers are trained here with the `tokenizers` library: one Llama-3-shaped (Llama 3's split
regex, byte-level, its special tokens) for Llama 3.1's template, one Qwen2-shaped (Qwen2's regex,
ChatML tokens, <think> and </think> as added tokens, NFC as Qwen's tokenizer.json has it) for Qwen3's
and ChatML's. transformers finds
assistant tokens only through {% generation %} tags, which the published templates lack, so each
template is also tagged here — around what megatrain's prefix rule learns of each assistant turn
(data/chat_template.h): Llama 3.1's content and <|eot_id|>, ChatML's and Qwen3's answer through
"<|im_end|>\n". Runs (each against transformers on the tagged template):
  - the published Llama 3.1 and ChatML templates: megatrain's prefix rule;
  - the tagged copies of all three, and one written here whose tags' white space trim_blocks,
    lstrip_blocks and "-" decide: megatrain's {% generation %} rule, one with --workers 3;
  - the published Qwen3 template, which drops earlier answers' thinking once a user turn follows:
    megatrain refuses those conversations (naming {% generation %}); with --skip-bad-lines it keeps
    exactly the others, equal to transformers'.

Usage: chat_preprocess_reference.py --megatrain BIN --templates DIR --out DIR
"""
import json
import os
import re
import subprocess
import sys

import numpy
import tokenizers
import transformers

from chat_template_reference import CHATML, LLAMA_DATE, PHRASES, conversations, reference_args
from ref_process import Mismatch, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "finetune"))
from make_model import LLAMA3_SPLIT, LLAMA_SPECIAL, byte_level_bpe  # noqa: E402

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = PHRASES * 10 + ["You are a helpful assistant. Réponds en français. system user", "\n\n- one\n\n- two\n\n"]


def must_replace(text, old, new):
    if old not in text:
        raise Mismatch(f"the published template changed: {old!r} not found")
    return text.replace(old, new)


def tag_llama(t):
    return must_replace(t, "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}",
                        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
                        "{%- if message['role'] == 'assistant' %}{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}"
                        "{% endgeneration %}{%- else %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endif %}")


def tag_qwen3(t):
    t = must_replace(t, "{{- '<|im_start|>' + message.role + '\\n<think>\\n' +", "{{- '<think>\\n' +")
    t = must_replace(t, "{{- '<|im_start|>' + message.role + '\\n' + content }}", "{{- content }}")
    t = must_replace(t, "        {%- if loop.index0 > ns.last_query_index %}",
                     "        {{- '<|im_start|>' + message.role + '\\n' }}{%- generation %}\n"
                     "        {%- if loop.index0 > ns.last_query_index %}")
    return must_replace(t, "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
                        "        {{- '<|im_end|>\\n' }}{%- endgeneration %}\n    {%- elif message.role == \"tool\" %}")


CHATML_TAGGED = ("{% for message in messages %}{% if message['role'] == 'assistant' %}{{'<|im_start|>assistant\\n'}}"
                 "{% generation %}{{ message['content'] + '<|im_end|>' + '\\n' }}{% endgeneration %}{% else %}"
                 "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


# Written here: generation tags on lines of their own, so trim_blocks, lstrip_blocks and the tags'
# own "-" decide what is inside them (the "-" of endgeneration keeps the newline after eos out).
BLOCKS_TAGGED = """{% for message in messages %}
    {% if message['role'] == 'assistant' %}
<|assistant|>
    {% generation %}
{{ message['content'] }}{{ eos_token }}
    {%- endgeneration %}

    {% else %}
<|{{ message['role'] }}|>
{{ message['content'] }}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}
"""


def read_dataset(prefix):
    """Documents and masks from PREFIX.bin/.idx/.lossmask, read by README's layouts."""
    idx = open(prefix + ".idx", "rb").read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        raise Mismatch(f"{prefix}.idx: not a Megatron index")
    dtype = {4: numpy.int32, 8: numpy.uint16}[idx[17]]
    n = int(numpy.frombuffer(idx, "<u8", 1, 18)[0])
    lengths = numpy.frombuffer(idx, "<i4", n, 34)
    tokens = numpy.fromfile(prefix + ".bin", dtype=dtype).astype(numpy.int64)
    mask = open(prefix + ".lossmask", "rb").read()
    if mask[:8] != b"MTLMASK\x00":
        raise Mismatch(f"{prefix}.lossmask: bad magic")
    count = int(numpy.frombuffer(mask, "<u8", 3, 8)[1])
    learned = numpy.unpackbits(numpy.frombuffer(mask, numpy.uint8, offset=32), bitorder="little")[:count]
    if count != len(tokens):
        raise Mismatch(f"{prefix}: {count} mask bits for {len(tokens)} tokens")
    ends = numpy.cumsum(lengths)
    return [(tokens[e - l:e].tolist(), learned[e - l:e].tolist()) for e, l in zip(ends, lengths)]


def expected(tok, template, convs):
    tok.chat_template = template
    out = []
    for c in convs:
        r = tok.apply_chat_template(c, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                    date_string=LLAMA_DATE)
        out.append((list(r["input_ids"]), list(r["assistant_masks"])))
    return out


def compare(name, got, want, eod):
    if len(got) != len(want):
        raise Mismatch(f"{name}: megatrain wrote {len(got)} documents, transformers has {len(want)}")
    for i, ((ids, mask), (ref_ids, ref_mask)) in enumerate(zip(got, want)):
        if ids != ref_ids + [eod]:
            at = next((k for k in range(min(len(ids), len(ref_ids))) if ids[k] != ref_ids[k]), None)
            raise Mismatch(f"{name}, document {i}: token ids differ (at {at}): megatrain {ids[:40]}…, transformers {ref_ids[:40]}…")
        if mask != ref_mask + [0]:
            at = next(k for k in range(len(ref_mask) + 1) if mask[k] != (ref_mask + [0])[k])
            raise Mismatch(f"{name}, document {i}: loss masks differ at token {at} (id {ids[at]}): megatrain "
                           f"{mask[max(0, at - 5):at + 5]}, transformers {(ref_mask + [0])[max(0, at - 5):at + 5]}")
    learned = sum(sum(m) for _, m in got)
    print(f"{name}: {len(got)} documents, {sum(len(d) for d, _ in got)} tokens ({learned} learned) equal transformers'")


def check_inspect(megatrain, prefix, got):
    """`megatrain data inspect` reports the dataset's learned tokens and each document's bits as read
    here from the files."""
    out = run(megatrain, "data", "inspect", prefix)
    want = f"{sum(sum(m) for _, m in got)} of {sum(len(d) for d, _ in got)} tokens learned"
    if want not in out:
        raise Mismatch(f"`data inspect {prefix}` says {out!r}, expected {want!r}")
    for d in (0, len(got) - 1):
        bits = re.search(r"^learned: (.*)$", run(megatrain, "data", "inspect", prefix, "--doc", d), re.M)
        if bits is None or [int(b) for b in bits[1].split()] != got[d][1]:
            raise Mismatch(f"`data inspect {prefix} --doc {d}` prints other mask bits than the .lossmask holds")
    print(f"data inspect: {want}, and the bits of documents 0 and {len(got) - 1}")


def main():
    args, work, read = reference_args(__doc__)
    llama, qwen3 = read("meta-llama-Llama-3.1-8B-Instruct.jinja"), read("Qwen-Qwen3-0.6B.jinja")
    # And two whose answers begin with newlines, which the split regex joins to the "\n" ending the
    # assistant header: a token straddling the learned text's first byte, learned as in transformers.
    convs = conversations() + [[{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "\nBecause."}],
                               [{"role": "user", "content": "List"}, {"role": "assistant", "content": "\n\n- one\n- two"},
                                {"role": "user", "content": "More"}, {"role": "assistant", "content": "\n- three"}],
                               # decomposed accents, which the Qwen-shaped tokenizer's NFC composes
                               [{"role": "user", "content": "Cafe\u0301?"}, {"role": "assistant", "content": "Oui, cafe\u0301 et the\u0301."}]]
    inputs = os.path.join(work, "conversations.jsonl")
    with open(inputs, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    toks = {}
    for family, split, special, added, bos, eos in (("llama", LLAMA3_SPLIT, LLAMA_SPECIAL, (), "<|begin_of_text|>", "<|eot_id|>"),
                                                    ("qwen", QWEN2_SPLIT, QWEN_SPECIAL, ("<think>", "</think>"), None, "<|im_end|>")):
        path = os.path.join(work, family + "-tokenizer.json")
        byte_level_bpe(CORPUS, split, special, 800, added, nfc=family == "qwen").save(path)
        toks[family] = (path, transformers.PreTrainedTokenizerFast(tokenizer_file=path, bos_token=bos, eos_token=eos))
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, {len(convs)} conversations")
    # name: (tokenizer family, template megatrain renders, the tagged template transformers renders, workers)
    cases = {"llama3.1 (prefix rule)": ("llama", llama, tag_llama(llama), 1),
             "llama3.1 (generation tags)": ("llama", tag_llama(llama), tag_llama(llama), 3),
             "chatml (prefix rule)": ("qwen", CHATML, CHATML_TAGGED, 1),
             "chatml (generation tags)": ("qwen", CHATML_TAGGED, CHATML_TAGGED, 1),
             "qwen3 (generation tags)": ("qwen", tag_qwen3(qwen3), tag_qwen3(qwen3), 2),
             "blocks (generation tags)": ("qwen", BLOCKS_TAGGED, BLOCKS_TAGGED, 1)}
    try:
        for n, (name, (family, ours, tagged, workers)) in enumerate(cases.items()):
            path, tok = toks[family]
            config = os.path.join(work, f"config{n}.json")
            json.dump({"chat_template": ours, "bos_token": tok.bos_token, "eos_token": tok.eos_token}, open(config, "w"))
            prefix = os.path.join(work, f"chat{n}")
            run(args.megatrain, "preprocess", "--format", "chat", "--tokenizer", path, "--tokenizer-config", config,
                "--input", inputs, "--output-prefix", prefix, "--workers", workers)
            eod = tok.convert_tokens_to_ids("<|end_of_text|>" if family == "llama" else "<|endoftext|>")
            got = read_dataset(prefix)
            compare(name, got, expected(tok, tagged, convs), eod)
            if n == 0:
                check_inspect(args.megatrain, prefix, got)
        # The published Qwen3 template: refused where a user turn follows an answer, the rest kept.
        path, tok = toks["qwen"]
        config = os.path.join(work, "qwen3-stock.json")
        json.dump({"chat_template": qwen3, "eos_token": "<|im_end|>"}, open(config, "w"))
        cmd = [args.megatrain, "preprocess", "--format", "chat", "--tokenizer", path, "--tokenizer-config", config,
               "--input", inputs, "--output-prefix", os.path.join(work, "qwen3-stock")]
        refused = subprocess.run(cmd, capture_output=True, text=True)
        if refused.returncode == 0 or "{% generation %}" not in refused.stderr:
            raise Mismatch(f"the published Qwen3 template on multi-turn conversations: expected a refusal naming "
                           f"{{% generation %}}, got exit {refused.returncode}: {refused.stderr}")
        print("qwen3 (published): refused:", refused.stderr.strip().splitlines()[-1][:160], "…")
        answered_then_asked = [any(m["role"] == "user" for m in c[i + 1:]) for c in convs
                               for i in [next(k for k, m in enumerate(c) if m["role"] == "assistant")]]
        summary = run(*(cmd + ["--skip-bad-lines"]))
        skipped = int(re.search(r"(\d+) bad lines skipped", summary).group(1)) if "skipped" in summary else 0
        if skipped != sum(answered_then_asked):
            raise Mismatch(f"qwen3 (published): {skipped} lines skipped, expected {sum(answered_then_asked)}: {summary}")
        kept = [c for c, bad in zip(convs, answered_then_asked) if not bad]
        compare(f"qwen3 (published, prefix rule, {skipped} refused conversations skipped)",
                read_dataset(os.path.join(work, "qwen3-stock")), expected(tok, tag_qwen3(qwen3), kept),
                tok.convert_tokens_to_ids("<|endoftext|>"))
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    print("OK: megatrain's chat token ids and loss masks equal transformers' apply_chat_template")
    return 0


if __name__ == "__main__":
    sys.exit(main())
