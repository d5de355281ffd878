"""Documents packed into samples (data.reset_position_ids, reset_attention_mask, eod_mask_loss) and
a loss mask in the data (PREFIX.lossmask) against an independent PyTorch trainer: 10 steps of `megatrain train` from a model that
transformers made at random (`megatrain import`), against the same 10 steps in float64 PyTorch
written here from the published definitions and Megatron-LM's semantics, not from megatrain's code:

  data      documents of 1 to 40 random tokens, each ending with the end-of-document token EOD,
            written as a Megatron .bin/.idx (uint16, one sequence per document) and read in order
            (shuffle off): sample i is stream[i·S, i·S + S] (data/gpt_dataset.h), inputs its first
            S tokens, targets its last S.
  documents Megatron's _get_ltor_masks_and_position_ids: in each sample a document ends at its EOD
            (inclusive) and the next starts after it; positions restart at 0 in each document
            (reset_position_ids); query t sees keys of its own document up to t only
            (reset_attention_mask: a block-diagonal causal mask); loss_mask[inputs == EOD] = 0
            (eod_mask_loss).
  loss mask each document's first k tokens (k drawn from 0 … its length − 1: a prompt) are not
            learned, the rest are; written as PREFIX.lossmask from README's layout (FNV-1a 64
            of the .idx lengths computed here); target t counts only if its token is learned.
  loss      sum over the global batch of the counted positions' cross-entropy, divided by the
            number of counted positions in the global batch (Megatron's per-token normalisation),
            whatever the micro-batch (2 micro-batches of 2 here: their counts differ).
  models    GPT-2 (learned positions read at the reset positions, LayerNorm, tanh GELU, tied head,
            Conv1D weights as transformers stores them) and Llama (RoPE at the reset positions,
            rotate-half; RMSNorm, SwiGLU, grouped-query attention, untied head); AdamW as
            torch.optim.AdamW, constant learning rate, no weight decay or clipping.

  unpacked  data.pack = false: sample i is document i, its first S+1 tokens (longer ones cut), then
            its last token repeated; the padding's targets never count.

Six runs: all three keys; reset_position_ids with eod_mask_loss but attention across
documents (with the attention inside documents, RoPE's scores depend on distances within a
document only, so restarted positions change nothing for Llama there); over the dataset with its
loss mask, whose samples hold different numbers of learned targets, all three keys and none;
unpacked, alone and with the loss mask (the unpacked runs must also differ by
more than 100·TOL_LOSS from the reference that learns the padding).
Shown, for each: megatrain's loss of every step (its metrics file) equals the reference's within
TOL_LOSS, and the reference's loss without the keys (and, in the third run, without the loss mask
alone) differs from it by more than 100·TOL_LOSS at step 1, so each changes the loss far beyond
the tolerance. Checked by mutation (each fails
here): positions not restarted (the second run), the mask one token late, the loss divided by all
positions instead of the counted ones, the loss mask ignored, the loss mask read one token early
(at the input instead of the target). After the 10 steps the exported weights equal the
reference's within TOL_WEIGHTS of each tensor's largest entry.

Tolerances: megatrain computes in float32 (u = 6e-8) and the reference in float64. The losses are
means over ~100 tokens of two-layer models: float32 rounding moves them by ~1e-7 relative
(measured below 1e-6); TOL_LOSS = 1e-5. Weights: 10 AdamW steps of lr 1e-3 move each weight by at
most 1e-2; a coordinate whose gradient is near 0 could take a direction that rounding flips; the
weights are compared at TOL_WEIGHTS of each tensor's scale (measured 5e-7 to 2.3e-4, the largest
where attention crosses documents). GPT-2's key bias is left out: a bias on every key adds the same score to every key of a query, so its exact
gradient is 0 and its updates are AdamW's normalised rounding noise on both sides.

Usage: document_reference.py --megatrain BIN --family gpt2|llama --out DIR
"""
import argparse
import json
import os
import shutil
import sys

import numpy
import torch
import transformers

from ref_process import Mismatch, run
from safetensors.numpy import load_file

VOCAB = 96
EOD = VOCAB - 1
SEQ = 32
MICRO, GLOBAL, STEPS = 2, 4, 10
LR, BETAS, EPS = 1e-3, (0.9, 0.95), 1e-8
STD = 0.3
TOL_LOSS = 1e-5
TOL_WEIGHTS = 1e-3

FAMILIES = {
    "gpt2": lambda: transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=SEQ, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False),
}


# ---- the data: a Megatron indexed dataset written here (Megatron-Core indexed_dataset.py's layout) ----

def documents(n_tokens, seed=5):
    rng = numpy.random.RandomState(seed)
    docs, total = [], 0
    while total < n_tokens:
        doc = list(rng.randint(0, EOD, size=rng.randint(1, 41))) + [EOD]
        docs.append(doc)
        total += len(doc)
    return docs


def write_indexed(prefix, docs):
    tokens = numpy.concatenate([numpy.asarray(d, dtype=numpy.uint16) for d in docs])
    tokens.tofile(prefix + ".bin")
    lengths = numpy.asarray([len(d) for d in docs], dtype=numpy.int32)
    pointers = numpy.concatenate([[0], numpy.cumsum(lengths[:-1].astype(numpy.int64) * 2)]).astype(numpy.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(numpy.asarray([1], dtype="<u8").tobytes())
        f.write(numpy.asarray([8], dtype="<u1").tobytes())  # uint16
        f.write(numpy.asarray([len(docs), len(docs) + 1], dtype="<u8").tobytes())
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(numpy.arange(len(docs) + 1, dtype="<i8").tobytes())
    return tokens.astype(numpy.int64)


def write_loss_mask(prefix, docs, seed=9):
    """PREFIX.lossmask (README "Loss masks in the data"): each document's first k tokens unlearned."""
    rng = numpy.random.RandomState(seed)
    learned = numpy.concatenate([numpy.repeat([0, 1], [k, len(d) - k]) for d in docs
                                 for k in [rng.randint(0, len(d))]]).astype(numpy.uint8)
    fingerprint = 0xCBF29CE484222325  # FNV-1a 64 over the .idx's int32 lengths
    for byte in numpy.asarray([len(d) for d in docs], dtype="<i4").tobytes():
        fingerprint = ((fingerprint ^ byte) * 0x100000001B3) % 2 ** 64
    with open(prefix + ".lossmask", "wb") as f:
        f.write(b"MTLMASK\x00")
        f.write(numpy.asarray([1, len(learned), fingerprint], dtype="<u8").tobytes())
        f.write(numpy.packbits(learned, bitorder="little").tobytes())
    return learned


def sample(stream, i):
    s = stream[i * SEQ: i * SEQ + SEQ + 1]
    return s[:-1], s[1:]


def unpacked_sample(docs, bits, i, pads_learned=False):
    """data.pack = false (README "Documents in a sample"): sample i is document i (shuffle off), its
    first SEQ+1 tokens, padded with its last token; (inputs, targets, the targets' learned bits),
    padding unlearned (learned only in the mutation the run must be told apart from)."""
    d, b = list(docs[i % len(docs)][:SEQ + 1]), list(bits[i % len(docs)][:SEQ + 1])
    pad = SEQ + 1 - len(d)
    d, b = d + [d[-1]] * pad, b + [int(pads_learned)] * pad
    return numpy.asarray(d[:-1]), numpy.asarray(d[1:]), numpy.asarray(b[1:])


# What a run sets: (reset_position_ids, reset_attention_mask, eod_mask_loss, the loss mask,
# data.pack = false).
ALL_KEYS, NO_KEYS = (True, True, True, False, False), (False, False, False, False, False)
# With the attention kept within each document RoPE's scores depend on distances inside a document
# only, so restarting the positions changes nothing for Llama; the second run attends across
# documents with restarted positions, where it does.
# The loss mask runs with the keys and alone (where only the mask leaves targets out).
# Unpacked: one document a sample, padded or cut (documents of 2 to 41 tokens, samples of 33), alone
# and with the loss mask (not with eod_mask_loss, which leaves out EOD padding on its own).
RUNS = [ALL_KEYS, (True, False, True, False, False), (True, True, True, True, False), (False, False, False, True, False),
        (False, False, False, False, True), (False, False, False, True, True)]


def layout(inputs, learned, keys):
    """(positions, allowed (S, S) mask, counted targets) of one sample, Megatron's semantics;
    learned: the loss-mask bits of the sample's targets."""
    reset_positions, reset_attention, mask_eod, loss_mask, unpacked = keys
    S = len(inputs)
    start = numpy.zeros(S, dtype=numpy.int64)
    s = 0
    for t in range(S):
        start[t] = s
        if inputs[t] == EOD:
            s = t + 1
    positions = numpy.arange(S) - start if reset_positions else numpy.arange(S)
    j, i = numpy.meshgrid(numpy.arange(S), numpy.arange(S))
    allowed = (j <= i) & (j >= start[:, None]) if reset_attention else j <= i
    counted = inputs != EOD if mask_eod else numpy.ones(S, dtype=bool)
    if loss_mask or unpacked:  # unpacked: padding is never learned
        counted = counted & (learned == 1)
    return torch.tensor(positions), torch.tensor(allowed), torch.tensor(counted)


# ---- the models, from the definitions, over transformers' own tensors (float64) ----

def rope(x, positions, theta):
    D = x.shape[-1]
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = positions.double()[:, None] * inv[None, :]  # (S, D/2)
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attend(q, k, v, allowed):
    """q (S, H, D), k/v (S, Hkv, D); query head h reads kv head h // (H / Hkv)."""
    H, Hkv, D = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, k) / D ** 0.5
    s = s.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1), v).reshape(q.shape[0], H * D)


def gpt2_logits(P, cfg, tokens, positions, allowed):
    C, H = cfg.n_embd, cfg.n_head
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][positions]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], cfg.layer_norm_epsilon)
    conv = lambda x, p: x @ P[p + ".weight"] + P[p + ".bias"]  # Conv1D: weight (in, out)
    for l in range(cfg.n_layer):
        L = f"transformer.h.{l}"
        qkv = conv(ln(x, L + ".ln_1"), L + ".attn.c_attn")
        q, k, v = (t.reshape(-1, H, C // H) for t in qkv.split(C, dim=-1))
        x = x + conv(attend(q, k, v, allowed), L + ".attn.c_proj")
        u = conv(ln(x, L + ".ln_2"), L + ".mlp.c_fc")
        g = 0.5 * u * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (u + 0.044715 * u ** 3)))
        x = x + conv(g, L + ".mlp.c_proj")
    return ln(x, "transformer.ln_f") @ P["transformer.wte.weight"].T


def llama_logits(P, cfg, tokens, positions, allowed):
    C, H, Hkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = C // H
    x = P["model.embed_tokens.weight"][tokens]
    rms = lambda x, p: x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.rms_norm_eps) * P[p + ".weight"]
    lin = lambda x, p: x @ P[p + ".weight"].T
    for l in range(cfg.num_hidden_layers):
        L = f"model.layers.{l}"
        h = rms(x, L + ".input_layernorm")
        q = rope(lin(h, L + ".self_attn.q_proj").reshape(-1, H, D), positions, cfg.rope_theta)
        k = rope(lin(h, L + ".self_attn.k_proj").reshape(-1, Hkv, D), positions, cfg.rope_theta)
        v = lin(h, L + ".self_attn.v_proj").reshape(-1, Hkv, D)
        x = x + lin(attend(q, k, v, allowed), L + ".self_attn.o_proj")
        h = rms(x, L + ".post_attention_layernorm")
        x = x + lin(torch.nn.functional.silu(lin(h, L + ".mlp.gate_proj")) * lin(h, L + ".mlp.up_proj"),
                    L + ".mlp.down_proj")
    return lin(rms(x, "model.norm"), "lm_head")


def reference_losses(family, model, data, keys, steps, pads_learned=False):
    stream, learned, docs = data
    bits = numpy.split(learned if keys[3] else numpy.ones_like(learned), numpy.cumsum([len(d) for d in docs])[:-1])
    cfg = model.config
    P = {k: v.detach().double().clone().requires_grad_(True) for k, v in model.state_dict().items()
         if not (family == "gpt2" and k == "lm_head.weight")}  # GPT-2's head is wte (tied)
    forward = gpt2_logits if family == "gpt2" else llama_logits
    opt = torch.optim.AdamW(list(P.values()), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        ids = [step * GLOBAL + i for i in range(GLOBAL)]
        if keys[4]:
            unpacked = [unpacked_sample(docs, bits, i, pads_learned) for i in ids]
            samples, targets_learned = [(inp, tgt) for inp, tgt, _ in unpacked], [b for _, _, b in unpacked]
        else:
            samples, targets_learned = [sample(stream, i) for i in ids], [sample(learned, i)[1] for i in ids]
        layouts = [layout(inp, b, keys) for (inp, _), b in zip(samples, targets_learned)]
        counted = sum(int(c.sum()) for _, _, c in layouts)
        total = 0.0
        for (inp, tgt), (pos, allowed, mask) in zip(samples, layouts):
            z = forward(P, cfg, torch.tensor(inp), pos, allowed)
            ce = torch.nn.functional.cross_entropy(z, torch.tensor(tgt), reduction="none")
            loss = (ce * mask).sum() / counted
            loss.backward()
            total += float(loss)
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().numpy() for k, v in P.items()}


def megatrain_run(args, keys, model, prefixes, work):
    prefix = prefixes[keys[3]]
    work = os.path.join(work, "run_" + "".join("1" if k else "0" for k in keys))
    hf_dir = os.path.join(work, "transformers")
    model.save_pretrained(hf_dir, safe_serialization=True)
    imported, config = os.path.join(work, "imported"), os.path.join(work, "imported.toml")
    run(args.megatrain, "import", "--hf", hf_dir, "--out", imported, "--config-out", config)
    ckpt, metrics = os.path.join(work, "ckpt"), os.path.join(work, "metrics.jsonl")
    flag = lambda k: "true" if k else "false"
    sets = {"train.seq_len": SEQ, "train.micro_batch_size": MICRO, "train.global_batch_size": GLOBAL,
            "train.steps": STEPS, "train.eval_interval": 0, "optimizer.lr": LR, "optimizer.min_lr": LR,
            "optimizer.warmup_steps": 0, "optimizer.beta1": BETAS[0], "optimizer.beta2": BETAS[1],
            "optimizer.eps": EPS, "optimizer.weight_decay": 0.0, "optimizer.grad_clip": 0.0,
            "model.dropout": 0.0, "data.train": f'"{prefix}"', "data.shuffle": "false",
            "data.eod_token": EOD, "data.reset_position_ids": flag(keys[0]),
            "data.reset_attention_mask": flag(keys[1]), "data.eod_mask_loss": flag(keys[2]),
            "data.pack": flag(not keys[4]), "log.interval": 1, "log.metrics_file": f'"{metrics}"',
            "checkpoint.dir": f'"{ckpt}"', "checkpoint.save_interval": STEPS,
            "checkpoint.load": f'"{imported}"'}
    cmd = [args.megatrain, "train", "--config", config]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run(*cmd)
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    losses = [r["loss"] for r in rows if "loss" in r]
    exported = os.path.join(work, "exported")
    run(args.megatrain, "export", "--checkpoint", ckpt, "--out", exported)
    return losses, load_file(os.path.join(exported, "model.safetensors"))


def check_run(args, keys, model, prefixes, data, work):
    print(f"reset_position_ids, reset_attention_mask, eod_mask_loss, loss mask, unpacked = {keys}")
    ours, weights = megatrain_run(args, keys, model, prefixes, work)
    want, want_weights = reference_losses(args.family, model, data, keys, STEPS)
    if len(ours) != STEPS:
        raise Mismatch(f"megatrain's metrics hold {len(ours)} step losses, expected {STEPS}")
    worst = 0.0
    for step, (a, b) in enumerate(zip(ours, want), 1):
        err = abs(a - b) / abs(b)
        worst = max(worst, err)
        print(f"step {step}: megatrain {a:.8f}  reference {b:.8f}  relative {err:.2e}")
        if err > TOL_LOSS:
            raise Mismatch(f"{keys}, step {step}: loss {a} against the reference's {b} (relative {err:.2e} > {TOL_LOSS})")
    # Unpacked samples are other samples than packed ones: what they must be told apart from is the
    # padding learned (below), not the packed run.
    if not keys[4]:
        plain, _ = reference_losses(args.family, model, data, NO_KEYS, 1)
        gap = abs(plain[0] - want[0]) / abs(want[0])
        print(f"step 1 without the keys (reference): {plain[0]:.8f}, relative gap {gap:.2e}")
        if gap <= 100 * TOL_LOSS:
            raise Mismatch(f"the keys change step 1's loss by only {gap:.2e}: the case cannot tell them apart")
    if keys[4]:
        padded, _ = reference_losses(args.family, model, data, keys, 1, pads_learned=True)
        gap = abs(padded[0] - want[0]) / abs(want[0])
        print(f"step 1 with the padding learned (reference): {padded[0]:.8f}, relative gap {gap:.2e}")
        if gap <= 100 * TOL_LOSS:
            raise Mismatch(f"learning the padding changes step 1's loss by only {gap:.2e}: the case cannot tell")
    if keys[3] and (keys[:3] != NO_KEYS[:3] or keys[4]):
        unmasked, _ = reference_losses(args.family, model, data, keys[:3] + (False,) + keys[4:], 1)
        gap = abs(unmasked[0] - want[0]) / abs(want[0])
        print(f"step 1 without the loss mask (reference): {unmasked[0]:.8f}, relative gap {gap:.2e}")
        if gap <= 100 * TOL_LOSS:
            raise Mismatch(f"the loss mask changes step 1's loss by only {gap:.2e}: the case cannot tell it apart")
    wmax = 0.0
    for name, ref in want_weights.items():
        got = weights[name].astype(numpy.float64)
        got = got.T if got.shape != ref.shape else got
        if name.endswith("attn.c_attn.bias"):  # GPT-2's key bias: its exact gradient is 0 (see above)
            C = ref.shape[0] // 3
            got, ref = numpy.concatenate([got[:C], got[2 * C:]]), numpy.concatenate([ref[:C], ref[2 * C:]])
        err = float(numpy.abs(got - ref).max() / numpy.abs(ref).max())
        wmax = max(wmax, err)
        if err > TOL_WEIGHTS:
            raise Mismatch(f"{keys}, after {STEPS} steps {name}: max difference {err:.2e} of its scale > {TOL_WEIGHTS}")
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
    prefixes = {False: os.path.join(work, "docs"), True: os.path.join(work, "masked")}
    docs = documents(STEPS * GLOBAL * SEQ + SEQ + 1)
    stream = write_indexed(prefixes[False], docs)
    write_indexed(prefixes[True], docs)
    learned = write_loss_mask(prefixes[True], docs)
    torch.manual_seed(4321)
    model = transformers.AutoModelForCausalLM.from_config(FAMILIES[args.family](), torch_dtype=torch.float32)
    with torch.no_grad():
        for name, t in model.named_parameters():
            t.normal_(0.0, STD)
            if name.endswith("weight") and t.dim() == 1:
                t.add_(1.0)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    try:
        for keys in RUNS:
            check_run(args, keys, model, prefixes, (stream, learned, docs), work)
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {work})")
        return 1
    print(f"OK: megatrain's {args.family} training on packed documents equals the PyTorch reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
