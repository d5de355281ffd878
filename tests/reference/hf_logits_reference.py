"""megatrain's Hugging Face interop against transformers itself: the same tokens give the same
logits in megatrain and in the model that `AutoModelForCausalLM.from_pretrained` builds, for one
family (GPT-2 → GPT2LMHeadModel; Llama with grouped-query attention and an untied head →
LlamaForCausalLM), in both directions:

  export: a model trained 3 steps by `megatrain train` (so biases and norm weights are no longer
          0 and 1) → `megatrain export` → transformers loads the folder (no missing, unexpected or
          misshapen tensor) → its logits equal `checkpoint_logits` on the megatrain checkpoint;
  import: a model built and randomly filled by transformers, saved with `save_pretrained` →
          `megatrain import` → `checkpoint_logits` on the imported checkpoint equals the logits of
          the transformers model.

Why this is independent: the export/import round trip (tests/trainer/test_hf_interop.cpp,
tests/e2e/test_hf_interop_e2e.cpp) passes whenever export and import agree with each other, e.g.
with the square attention-output weight (GPT-2's attn.c_proj, Llama's o_proj) transposed on both
sides. Here the other side is transformers' own modelling code (pinned in
scripts/requirements-ref.txt), which reads the tensors by its own names and layouts.

Tolerance: the transformers model runs in float64 (its float32 weights converted exactly), so the
difference is megatrain's float32 rounding alone: max |ours − theirs| ≤ 3e-5 · max(1, max |theirs|)
over all T × vocab_size logits (measured 4e-7 to 3e-6 of the scale; 10× headroom for other CPUs'
BLAS kernels). The weights are drawn with standard deviation 0.3, so logits are far from uniform
(checked: their spread over the vocabulary is ≥ 1) and a transposed or misplaced tensor moves them
by O(1): attn.c_proj / o_proj transposed on both export and import gives 0.4 to 1.3 of the scale.

Usage: hf_logits_reference.py --megatrain BIN --logits-tool BIN --family gpt2|llama --out DIR
Exit status 0: equal within the tolerance; 1: a difference or a failing command (the message says
which). DIR is emptied first and kept after a failure.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy
import torch
import transformers

VOCAB = 257            # the bytes tokenizer; padded to 384 inside megatrain
SEQ = 32               # = max_seq_len: every position is compared
STD = 0.3              # weight scale: logits far from uniform
TOLERANCE = 3e-5       # of max(1, max |logit|)
MIN_SPREAD = 1.0       # smallest allowed standard deviation of a row of logits

FAMILIES = {
    "gpt2": {
        "class": "GPT2LMHeadModel",
        "megatrain": "",
        "hf_config": lambda: transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    },
    "llama": {
        "class": "LlamaForCausalLM",
        "megatrain": 'norm = "rmsnorm"\nposition = "rope"\nactivation = "swiglu"\nn_kv_heads = 2\n'
                     "bias = false\ntie_embeddings = false\n",
        "hf_config": lambda: transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False),
    },
}


class Mismatch(Exception):
    pass


def run(*cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise Mismatch(f"`{' '.join(map(str, cmd))}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def megatrain_logits(tool, checkpoint, ids, work):
    out = os.path.join(work, "logits.f32")
    printed = run(tool, checkpoint, out, *ids).split()
    if printed != [str(len(ids)), str(VOCAB)]:
        raise Mismatch(f"checkpoint_logits printed {printed}, expected [{len(ids)}, {VOCAB}]")
    return numpy.fromfile(out, dtype=numpy.float32).reshape(len(ids), VOCAB)


def hf_logits(model, ids):
    """Logits (T, V) of a transformers model, computed in float64."""
    model = model.double().eval()
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.int64)).logits[0].numpy()


def compare(ours, theirs, what):
    spread = float(theirs.std(axis=1).min())
    if spread < MIN_SPREAD:
        raise Mismatch(f"{what}: logits too uniform to test anything (smallest row spread {spread:.3g})")
    scale = max(1.0, float(numpy.abs(theirs).max()))
    diff = numpy.abs(ours.astype(numpy.float64) - theirs)
    worst = numpy.unravel_index(int(diff.argmax()), diff.shape)
    line = (f"{what}: max |megatrain - transformers| = {diff.max():.3g} at (token {worst[0]}, id "
            f"{worst[1]}) of scale {scale:.3g} (relative {diff.max() / scale:.2g}, tolerance "
            f"{TOLERANCE:g}); smallest row spread {spread:.3g}")
    if diff.max() > TOLERANCE * scale:
        raise Mismatch(f"{line}\nmegatrain {ours[worst]:.6g}, transformers {theirs[worst]:.6g}")
    return line


def training_text():
    rng = numpy.random.RandomState(7)
    words = ["the", "model", "logits", "token", "weight", "export", "import", "layer", "head", "of"]
    return " ".join(words[i] for i in rng.randint(0, len(words), size=4000)) + "\n"


def export_direction(args, family, ids, work):
    text = os.path.join(work, "train.txt")
    with open(text, "w") as f:
        f.write(training_text())
    prefix = os.path.join(work, "train")
    run(args.megatrain, "preprocess", "--input", text, "--tokenizer", "bytes", "--output-prefix", prefix)
    ckpt = os.path.join(work, "ckpt")
    config = os.path.join(work, "train.toml")
    with open(config, "w") as f:
        f.write(f"""[model]
n_layers = 2
d_model = 64
n_heads = 4
vocab_size = {VOCAB}
max_seq_len = {SEQ}
init_std = {STD}
dropout = 0.0
{family["megatrain"]}[train]
seq_len = {SEQ}
micro_batch_size = 4
global_batch_size = 4
steps = 3
eval_interval = 0
[optimizer]
lr = 0.03
min_lr = 0.03
warmup_steps = 0
[data]
train = "{prefix}"
[checkpoint]
dir = "{ckpt}"
save_interval = 3
""")
    run(args.megatrain, "train", "--config", config)
    hf_dir = os.path.join(work, "exported")
    run(args.megatrain, "export", "--checkpoint", ckpt, "--out", hf_dir)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    if type(model).__name__ != family["class"]:
        raise Mismatch(f"transformers loads the export as {type(model).__name__}, not {family['class']}")
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise Mismatch(f"transformers loading {hf_dir}: {problems}")
    return compare(megatrain_logits(args.logits_tool, ckpt, ids, work), hf_logits(model, ids),
                   f"export ({family['class']})")


def import_direction(args, family, ids, work):
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(
        family["hf_config"](), torch_dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, STD)
            if name.endswith("weight") and p.dim() == 1:  # norm weights around 1
                p.add_(1.0)
    hf_dir = os.path.join(work, "transformers")
    model.save_pretrained(hf_dir, safe_serialization=True)
    imported = os.path.join(work, "imported")
    run(args.megatrain, "import", "--hf", hf_dir, "--out", imported)
    return compare(megatrain_logits(args.logits_tool, imported, ids, work), hf_logits(model, ids),
                   f"import ({family['class']})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--megatrain", required=True)
    p.add_argument("--logits-tool", required=True)
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    family = FAMILIES[args.family]
    work = os.path.abspath(args.out)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    ids = numpy.random.RandomState(42).randint(0, VOCAB, size=SEQ).tolist()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {numpy.__version__}")
    try:
        lines = [export_direction(args, family, ids, work), import_direction(args, family, ids, work)]
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    print("\n".join(lines))
    print(f"OK: megatrain's {args.family} logits equal transformers' in both directions")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
