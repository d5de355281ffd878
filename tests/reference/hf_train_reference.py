"""Training the checkpoints of 2026 against transformers' own models: a model that transformers makes
at random (Llama with each RoPE scaling of rope_scaling: llama3, linear, yarn; Qwen2 with its q/k/v
bias), imported by `megatrain import` and trained 10 steps by `megatrain train`, against the same
transformers model trained the same 10 steps in float64 by torch.optim.AdamW. The reference's
forward is transformers' modelling code (pinned in scripts/requirements-ref.txt), so the RoPE
frequencies, the attention factor and the biases it trains with are transformers', not ours.

  data   random tokens written as a Megatron .bin/.idx and read in order (shuffle off): sample i is
         stream[i·S, i·S + S], inputs its first S tokens, targets its last S.
  loss   the mean cross-entropy over the global batch's tokens (2 micro-batches of 2 samples).
  AdamW  constant learning rate, no weight decay or clipping.

Shown: megatrain's loss at every step (its metrics file) equals the reference's within TOL_LOSS;
the family's feature changes step 1's loss by more than 100·TOL_LOSS (the reference without the
scaling, or with the biases zeroed), so the case can tell it apart; after the 10 steps the
exported weights equal the reference's within TOL_WEIGHTS of each tensor's largest entry.

Tolerances, as tests/reference/document_reference.py argues them: megatrain is float32, the
reference float64 (but for transformers' RoPE angles, which it computes in float32 whatever the
model's dtype); losses of two-layer models over 128 tokens move by ~1e-7 relative, TOL_LOSS = 1e-5;
weights after 10 AdamW steps of lr 1e-3 at TOL_WEIGHTS = 1e-3 of each tensor's scale.

Usage: hf_train_reference.py --megatrain BIN --family llama3_rope|linear_rope|yarn_rope|qwen2 --out DIR
"""
import argparse
import json
import os
import shutil
import sys

import numpy
import torch
import transformers

from document_reference import write_indexed
from ref_process import Mismatch, run
from safetensors.numpy import load_file

VOCAB = 96
SEQ = 32
MICRO, GLOBAL, STEPS = 2, 4, 10
LR, BETAS, EPS = 1e-3, (0.9, 0.95), 1e-8
STD = 0.3
TOL_LOSS = 1e-5
TOL_WEIGHTS = 1e-3

LLAMA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=SEQ, rms_norm_eps=1e-5, rope_theta=10000.0,
             tie_word_embeddings=False)
# Head size 16: wavelengths 6.3, 20, 63, … positions (see hf_logits_reference.py for the cases each scaling meets).
FAMILIES = {
    "llama3_rope": lambda **over: transformers.LlamaConfig(**{**LLAMA, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}, **over}),
    "linear_rope": lambda **over: transformers.LlamaConfig(**{**LLAMA, "rope_scaling": {
        "rope_type": "linear", "factor": 4.0}, **over}),
    "yarn_rope": lambda **over: transformers.LlamaConfig(**{**LLAMA, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0}, **over}),
    "qwen2": lambda **over: transformers.Qwen2Config(**{**LLAMA, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
                                                        "tie_word_embeddings": True, **over}),
}


def sample(stream, i):
    s = stream[i * SEQ: i * SEQ + SEQ + 1]
    return s[:-1], s[1:]


def reference(model, stream, steps):
    """(loss of each step, weights after the steps) of MODEL trained in float64 by torch.optim.AdamW."""
    model = model.double().train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        total = 0.0
        for m in range(GLOBAL // MICRO):
            pairs = [sample(stream, step * GLOBAL + m * MICRO + i) for i in range(MICRO)]
            inputs = torch.tensor(numpy.stack([p[0] for p in pairs]))
            targets = torch.tensor(numpy.stack([p[1] for p in pairs]))
            logits = model(input_ids=inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                                     reduction="sum") / (GLOBAL * SEQ)
            loss.backward()
            total += float(loss)
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def megatrain_run(args, hf_dir, prefix, work):
    imported, config = os.path.join(work, "imported"), os.path.join(work, "imported.toml")
    run(args.megatrain, "import", "--hf", hf_dir, "--out", imported, "--config-out", config)
    ckpt, metrics = os.path.join(work, "ckpt"), os.path.join(work, "metrics.jsonl")
    sets = {"train.seq_len": SEQ, "train.micro_batch_size": MICRO, "train.global_batch_size": GLOBAL,
            "train.steps": STEPS, "train.eval_interval": 0, "optimizer.lr": LR, "optimizer.min_lr": LR,
            "optimizer.warmup_steps": 0, "optimizer.beta1": BETAS[0], "optimizer.beta2": BETAS[1],
            "optimizer.eps": EPS, "optimizer.weight_decay": 0.0, "optimizer.grad_clip": 0.0,
            "model.dropout": 0.0, "data.train": f'"{prefix}"', "data.shuffle": "false", "log.interval": 1,
            "log.metrics_file": f'"{metrics}"', "checkpoint.dir": f'"{ckpt}"',
            "checkpoint.save_interval": STEPS, "checkpoint.load": f'"{imported}"'}
    cmd = [args.megatrain, "train", "--config", config]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run(*cmd)
    losses = [r["loss"] for r in map(json.loads, filter(str.strip, open(metrics))) if "loss" in r]
    exported = os.path.join(work, "exported")
    run(args.megatrain, "export", "--checkpoint", ckpt, "--out", exported)
    return losses, load_file(os.path.join(exported, "model.safetensors"))


def random_model(config):
    torch.manual_seed(4321)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32,
                                                          attn_implementation="eager")
    with torch.no_grad():
        for name, t in model.named_parameters():
            t.normal_(0.0, STD)
            if name.endswith("weight") and t.dim() == 1:
                t.add_(1.0)
    return model


def without_feature(family, model):
    """MODEL without the family's feature: RoPE unscaled, or Qwen2's q/k/v biases zeroed."""
    if family != "qwen2":
        return random_model(FAMILIES[family](rope_scaling=None))
    plain = random_model(FAMILIES[family]())
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        for name, t in plain.named_parameters():
            if name.endswith("proj.bias"):
                t.zero_()
    return plain


def check(args, work):
    prefix = os.path.join(work, "tokens")
    rng = numpy.random.RandomState(5)
    stream = write_indexed(prefix, [list(rng.randint(0, VOCAB, size=STEPS * GLOBAL * SEQ + 1))])
    model = random_model(FAMILIES[args.family]())
    hf_dir = os.path.join(work, "transformers")
    model.save_pretrained(hf_dir, safe_serialization=True)
    ours, weights = megatrain_run(args, hf_dir, prefix, work)
    plain, _ = reference(without_feature(args.family, model), stream, 1)
    want, want_weights = reference(model, stream, STEPS)
    if len(ours) != STEPS:
        raise Mismatch(f"megatrain's metrics hold {len(ours)} step losses, expected {STEPS}")
    worst = 0.0
    for step, (a, b) in enumerate(zip(ours, want), 1):
        err = abs(a - b) / abs(b)
        worst = max(worst, err)
        print(f"step {step}: megatrain {a:.8f}  reference {b:.8f}  relative {err:.2e}")
        if err > TOL_LOSS:
            raise Mismatch(f"step {step}: loss {a} against the reference's {b} (relative {err:.2e} > {TOL_LOSS})")
    gap = abs(plain[0] - want[0]) / abs(want[0])
    print(f"step 1 without the family's feature (reference): {plain[0]:.8f}, relative gap {gap:.2e}")
    if gap <= 100 * TOL_LOSS:
        raise Mismatch(f"the feature changes step 1's loss by only {gap:.2e}: the case cannot tell it apart")
    wmax = 0.0
    for name, ref in want_weights.items():
        if name == "lm_head.weight" and name not in weights:  # tied: the embedding
            continue
        got = weights[name].astype(numpy.float64)
        err = float(numpy.abs(got - ref).max() / numpy.abs(ref).max())
        wmax = max(wmax, err)
        if err > TOL_WEIGHTS:
            raise Mismatch(f"after {STEPS} steps {name}: max difference {err:.2e} of its scale > {TOL_WEIGHTS}")
    print(f"losses within {worst:.2e}, weights after {STEPS} steps within {wmax:.2e} of their scale")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--megatrain", required=True)
    p.add_argument("--family", required=True, choices=sorted(FAMILIES))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    work = os.path.abspath(args.out)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    try:
        check(args, work)
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    print(f"OK: megatrain's {args.family} training equals transformers' model trained by PyTorch")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
