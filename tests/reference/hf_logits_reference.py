"""megatrain's Hugging Face interop against transformers itself: the same tokens give the same
logits in megatrain and in the model that `AutoModelForCausalLM.from_pretrained` builds, for one
family (GPT-2 → GPT2LMHeadModel; Llama with grouped-query attention and an untied head →
LlamaForCausalLM, also with each RoPE scaling of rope_scaling (llama3, linear, yarn); Qwen2 with its
q/k/v bias and a tied head → Qwen2ForCausalLM; Mixtral, the same with every block's MLP replaced by 4 experts of which a softmax
router picks 2 per token → MixtralForCausalLM), in both directions:

  export: a model trained 3 steps by `megatrain train` (so biases and norm weights are no longer
          0 and 1) → `megatrain export` → transformers loads the folder (no missing, unexpected or
          misshapen tensor) → its logits equal `checkpoint_logits` on the megatrain checkpoint;
  import: a model built and randomly filled by transformers, saved with `save_pretrained` →
          `megatrain import` → `checkpoint_logits` on the imported checkpoint equals the logits of
          the transformers model.

Why this is independent: the export/import round trips (tests/interop/test_hf_interop.cpp and
test_hf_mixtral.cpp, tests/e2e/test_hf_interop_e2e.cpp) pass whenever export and import agree with
each other, e.g. with the square attention-output weight (GPT-2's attn.c_proj, Llama's o_proj)
transposed on both sides, or Mixtral's w1 and w3 swapped. Here the other side is transformers' own modelling code (pinned in
scripts/requirements-ref.txt), which reads the tensors by its own names and layouts.

Tolerance: the transformers model runs in float64 (its float32 weights converted exactly), so the
difference is megatrain's float32 rounding (and, for Mixtral, the router softmax transformers
computes in float32 even in a float64 model): max |ours − theirs| ≤ 3e-5 · max(1, max |theirs|)
over all T × vocab_size logits (measured 4e-7 to 3e-6 of the scale for GPT-2 and Llama, 3e-6 to
6e-6 for Mixtral; 5× headroom or more for other CPUs' BLAS kernels). The weights are drawn with
standard deviation 0.3, so logits are far from uniform (checked: their spread over the vocabulary
is ≥ 1) and a transposed or misplaced tensor moves them by O(1): attn.c_proj / o_proj transposed
on both export and import gives 0.4 to 1.3 of the scale, Mixtral's w1 and w3 swapped on both 0.98.

Routing (Mixtral): a token's experts are the top 2 of its router logits, a discontinuous choice, so
megatrain's float32 and transformers' float64 (whose softmax before the top-k is float32 too) could
pick different experts where the 2nd and 3rd largest logits are within rounding of each other, and
the logits would then differ by O(1) for a reason that is no bug. The test refuses a case (fixed
seeds, so this is a property of the case, not luck at run time) where any token in any block has a
gap under MIN_ROUTER_GAP between its 2nd and 3rd router logits in transformers' float64 forward.
1e-3 is over 10× the largest float32 error measured in any output logit (6e-5, at a scale of 10;
router logits are of the same size and depth), and the smallest gaps of the cases here are 0.075
(export) and 0.017 (import), so every choice is unambiguous and all T tokens are compared.

Usage: hf_logits_reference.py --megatrain BIN --logits-tool BIN --family FAMILY (of FAMILIES) --out DIR
Exit status 0: equal within the tolerance; 1: a difference or a failing command (the message says
which). DIR is emptied first and kept after a failure.
"""
import argparse
import os
import shutil
import sys

import numpy
import torch
import transformers

from ref_process import Mismatch, run

VOCAB = 257            # the bytes tokenizer; padded to 384 inside megatrain
SEQ = 32               # = max_seq_len: every position is compared
STD = 0.3              # weight scale: logits far from uniform
TOLERANCE = 3e-5       # of max(1, max |logit|)
MIN_SPREAD = 1.0       # smallest allowed standard deviation of a row of logits
MIN_ROUTER_GAP = 1e-3  # smallest allowed gap between the k-th and (k+1)-th router logit of a token

LLAMA = ('norm = "rmsnorm"\nposition = "rope"\nactivation = "swiglu"\nn_kv_heads = 2\n'
         "bias = false\ntie_embeddings = false\n")
LLAMA_HF = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)

FAMILIES = {
    "gpt2": {
        "class": "GPT2LMHeadModel",
        "megatrain": "",
        "hf_config": lambda: transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    },
    "llama": {"class": "LlamaForCausalLM", "megatrain": LLAMA, "hf_config": lambda: transformers.LlamaConfig(**LLAMA_HF)},
    # RoPE rescaled for a longer context (Llama 3.1's rope_scaling): with head size 16 and θ = 10⁴
    # the wavelengths are 6.3, 20, 63, … positions, so an original context of 32 keeps pair 0,
    # blends pair 1 and divides the rest by the factor: all three of llama3's cases.
    "llama3_rope": {
        "class": "LlamaForCausalLM",
        "megatrain": LLAMA + 'rope_scaling = "llama3"\nrope_factor = 8.0\nrope_original_max_len = 32\n',
        "hf_config": lambda: transformers.LlamaConfig(
            **LLAMA_HF, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    },
    "linear_rope": {
        "class": "LlamaForCausalLM",
        "megatrain": LLAMA + 'rope_scaling = "linear"\nrope_factor = 4.0\n',
        "hf_config": lambda: transformers.LlamaConfig(**LLAMA_HF, rope_scaling={"type": "linear", "factor": 4.0}),
    },
    # YaRN over max_position_embeddings = 32 (transformers 4.49 measures its ramp there): pairs 0, 1
    # and 2 on are unscaled, blended and divided by the factor; q and k scaled by 0.1·ln 4 + 1.
    "yarn_rope": {
        "class": "LlamaForCausalLM",
        "megatrain": LLAMA + 'rope_scaling = "yarn"\nrope_factor = 4.0\n',
        "hf_config": lambda: transformers.LlamaConfig(**LLAMA_HF, rope_scaling={"rope_type": "yarn", "factor": 4.0}),
    },
    # Qwen2.5: Llama with a bias on q, k and v only; tied head, as the small Qwen2.5 models.
    "qwen2": {
        "class": "Qwen2ForCausalLM",
        "megatrain": 'norm = "rmsnorm"\nposition = "rope"\nactivation = "swiglu"\nn_kv_heads = 2\n'
                     "bias = false\nqkv_bias = true\ntie_embeddings = true\nrope_theta = 1000000.0\n"
                     "norm_eps = 1e-6\n",
        "hf_config": lambda: transformers.Qwen2Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
            rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True),
    },
    # Dropless (capacity_factor 0), so checkpoint_logits' training forward routes as transformers does.
    "mixtral": {
        "class": "MixtralForCausalLM",
        "megatrain": 'norm = "rmsnorm"\nposition = "rope"\nactivation = "swiglu"\nn_kv_heads = 2\n'
                     "bias = false\ntie_embeddings = false\n"
                     "[moe]\nn_experts = 4\ntop_k = 2\nd_ff_expert = 96\naux_loss_coef = 0.01\n",
        "hf_config": lambda: transformers.MixtralConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
            num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    },
}


def megatrain_logits(tool, checkpoint, ids, work):
    out = os.path.join(work, "logits.f32")
    printed = run(tool, checkpoint, out, *ids).split()
    if printed != [str(len(ids)), str(VOCAB)]:
        raise Mismatch(f"checkpoint_logits printed {printed}, expected [{len(ids)}, {VOCAB}]")
    return numpy.fromfile(out, dtype=numpy.float32).reshape(len(ids), VOCAB)


def hf_logits(model, ids):
    """Logits (T, V) of a transformers model, computed in float64; for an MoE model also the smallest
    gap between a token's k-th and (k+1)-th router logit over all tokens and blocks (else None)."""
    model = model.double().eval()
    k = getattr(model.config, "num_experts_per_tok", 0)
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.int64), output_router_logits=k > 0)
    gap = None
    if k > 0:
        # router_logits: one (T, E) tensor per block; sorted descending, column k-1 is the last chosen.
        ranked = [numpy.sort(z.numpy(), axis=1)[:, ::-1] for z in out.router_logits]
        gap = min(float((r[:, k - 1] - r[:, k]).min()) for r in ranked)
    return out.logits[0].numpy(), gap


def compare_model(ours, theirs_and_gap, what):
    theirs, gap = theirs_and_gap
    if gap is not None and gap < MIN_ROUTER_GAP:
        raise Mismatch(f"{what}: routing too close to call (a router-logit gap of {gap:.3g} at the top-k "
                       f"boundary, under {MIN_ROUTER_GAP:g}): float32 may pick other experts; change the case")
    line = compare(ours, theirs, what)
    return line if gap is None else f"{line}; smallest top-k router-logit gap {gap:.3g}"


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
    return compare_model(megatrain_logits(args.logits_tool, ckpt, ids, work), hf_logits(model, ids),
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
    return compare_model(megatrain_logits(args.logits_tool, imported, ids, work), hf_logits(model, ids),
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
