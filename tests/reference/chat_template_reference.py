"""Chat templates against transformers' own apply_chat_template: `megatrain tokenizer chat` renders 50
conversations (system prompts or none, one to four user/assistant exchanges, a conversation ending on
a user turn, non-ASCII text, contents with surrounding white space and newlines) with three
templates — Llama 3.1's and Qwen3's as published (the files scripts/setup.sh unpacks into
build/_deps/minja/templates), ChatML (written here from its published format) and one written here
whose white space trim_blocks and lstrip_blocks decide — with and without
the generation prompt, and every rendering must equal the text transformers renders (tokenize=False)
from a tokenizer carrying the same chat_template, bos_token and eos_token.

megatrain defines no strftime_now (data/chat_template.h), so Llama 3.1's template prints its fixed
date; transformers is given that date (date_string) so that both render the same system header.

Usage: chat_template_reference.py --megatrain BIN --templates DIR --out DIR
"""
import argparse
import json
import os
import random
import shutil
import sys

import tokenizers
import transformers

from ref_process import Mismatch, run

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Written here, Zephyr-like: block tags on indented lines of their own, so transformers' trim_blocks
# and lstrip_blocks decide its white space (the published templates control theirs with {%- -%}).
BLOCKS = """{% for message in messages %}
    {% if message['role'] == 'system' %}
<|system|>
{{ message['content'] }}{{ eos_token }}
    {% else %}
<|{{ message['role'] }}|>
{{ message['content'] }}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}
"""
LLAMA_DATE = "26 Jul 2024"  # Llama 3.1's template's own date when strftime_now is not defined

PHRASES = ["What is the capital of France?", "Paris.", "Grüß Gott, wie geht's?", "日本語で答えてください。",
           "Explain  two spaces\nand a newline.", "  leading and trailing  ", "emoji 🚀✨ and ümlauts",
           "مرحبا بالعالم", "code: `print(1 + 1)`\n```\nx = {'a': 1}\n```", "Short.", "Ça va ? Très bien.",
           "Сколько будет 2+2?", "4", "A list:\n- one\n- two", "¿Por qué?", "Tab\tseparated"]


def conversations(n=50, seed=7):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        messages = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": rng.choice(["You are terse.", "Réponds en français.",
                                                                     "You are a helpful assistant.\nBe kind."])})
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": " ".join(rng.sample(PHRASES, rng.randint(1, 3)))})
            messages.append({"role": "assistant", "content": " ".join(rng.sample(PHRASES, rng.randint(1, 3)))})
        if i % 5 == 4:
            messages.append({"role": "user", "content": rng.choice(PHRASES)})  # ends on a user turn
        out.append(messages)
    return out


def reference_tokenizer(template, bos, eos):
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=model, bos_token=bos, eos_token=eos)
    tok.chat_template = template
    return tok


def reference_args(doc):
    """The command line of the chat references (--megatrain BIN --templates DIR --out DIR; DOC's first
    paragraph their help): the arguments, the emptied work folder, and a reader of DIR's templates."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--megatrain", required=True)
    p.add_argument("--templates", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    work = os.path.abspath(args.out)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return args, work, lambda name: open(os.path.join(args.templates, name), encoding="utf-8").read()


def main():
    args, work, read = reference_args(__doc__)
    cases = {
        "llama3.1": (read("meta-llama-Llama-3.1-8B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
        "qwen3": (read("Qwen-Qwen3-0.6B.jinja"), None, "<|im_end|>"),
        "chatml": (CHATML, None, "<|im_end|>"),
        "blocks": (BLOCKS, None, "</s>"),
    }
    convs = conversations()
    inputs = os.path.join(work, "conversations.jsonl")
    with open(inputs, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    print(f"transformers {transformers.__version__}, {len(convs)} conversations")
    try:
        for name, (template, bos, eos) in cases.items():
            config = os.path.join(work, name + ".json")
            with open(config, "w", encoding="utf-8") as f:
                json.dump({"chat_template": template, "bos_token": bos, "eos_token": eos}, f)
            tok = reference_tokenizer(template, bos, eos)
            for generation in (False, True):
                cmd = [args.megatrain, "tokenizer", "chat", "--config", config, "--input", inputs]
                ours = [json.loads(line) for line in run(*(cmd + (["--add-generation-prompt"] if generation else []))).splitlines()]
                if len(ours) != len(convs):
                    raise Mismatch(f"{name}: megatrain rendered {len(ours)} conversations, expected {len(convs)}")
                for i, (c, got) in enumerate(zip(convs, ours)):
                    want = tok.apply_chat_template(c, tokenize=False, add_generation_prompt=generation,
                                                   date_string=LLAMA_DATE)
                    if got != want:
                        at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
                        raise Mismatch(f"{name}, generation prompt {generation}, conversation {i}: renderings differ at "
                                       f"character {at}: megatrain {got[at:at + 60]!r}, transformers {want[at:at + 60]!r}")
                print(f"{name}, generation prompt {generation}: {len(convs)} renderings equal transformers'")
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    print("OK: megatrain renders the chat templates as transformers' apply_chat_template does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
