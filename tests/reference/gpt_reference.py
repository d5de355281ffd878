#!/usr/bin/env python3
"""Independent float64 reference of megatrain's GPT model and AdamW (numpy only).

Runs `dump_gpt_case FAMILY OUT` (tests/reference/dump_gpt_case.cpp), which writes the C++ model's
inputs, parameters, logits, loss, gradients and two AdamW steps, then recomputes all of them here
from the published definitions, not from megatrain's code:

  model   GPT-2 (Radford et al. 2019): token + learned position embedding, pre-norm blocks with
          LayerNorm (biased variance, eps inside the square root), causal multi-head attention
          (scores q·k/sqrt(D)), GELU in its tanh form 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
          (the form GPT-2 uses and the one megatrain's kernels/ops.h names), biases, tied head.
          Llama (Touvron et al. 2023): RMSNorm x/sqrt(mean(x^2) + eps)*w, RoPE in Hugging Face's
          "rotate half" layout (README "Interop with Hugging Face": megatrain's q/k rows load as
          LlamaForCausalLM's q_proj/k_proj), i.e. for j < D/2 the pair (x_j, x_{j+D/2}) rotates by
          t*theta^(-2j/D); grouped-query attention where query head h reads kv head h // (H/Hkv)
          (HF repeat_kv); SwiGLU silu(gate)*up with the fc rows [gate | up]; no biases; untied head.
          Layouts are those of README's tensor table: weights (out, in), qkv rows [q | k | v] with
          each head's D rows contiguous.
  loss    mean over the B*T tokens of -log softmax(logits[:vocab])[target]; the padded vocabulary
          columns are not part of the softmax (the reference never computes them).
  grads   complex-step differentiation on every coordinate: dL/dθ_k = Im L(θ + i·h·e_k) / h with
          h = 1e-20, exact to float64 rounding (no truncation or cancellation error). The softmaxes
          subtract the max of the real part, so every operation stays analytic. Coordinates in the
          padded vocabulary rows (row >= valid_rows) are not read by this forward, so their exact
          gradient is 0 and is compared as such without a perturbation.
  AdamW   torch.optim.AdamW (documented algorithm, non-amsgrad, maximize=False), after
          torch.nn.utils.clip_grad_norm_: g *= min(1, max_norm/(||g||_2 + 1e-6)) over all
          parameters; then p -= lr*wd*p (decoupled, only for parameters that decay), m = b1 m +
          (1-b1) g, v = b2 v + (1-b2) g^2, p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
          Decay groups from the names: matrices always; embed.* only with decay_embeddings; norm
          weights and *.bias only with decay_norms_and_biases. The reference applies the C++'s own
          dumped gradients (the gradient check is separate), starting from the dumped s0.

Tolerances. Each tensor is compared as err = max|got - ref| / max|ref| (qkv split into q, k, v and
a SwiGLU fc into gate, up: see parts(); gradients and optimizer states with max|ref| floored at 1e-2
of the largest entry of their kind, see check_all); the C++ computes in float32 (u = 6e-8).
  logits, loss          1e-5. Rounding through ~10 sequential ops of two layers, each a sum of
                        <= 64 terms, is ~10-100 u of the scale; measured <= 4e-7. A wrong
                        transpose, head mapping or norm is O(1e-2..1).
  gradients             1e-4. Backward adds reductions over the B*T tokens and the 1/rms factors
                        of the norms; measured <= 1e-6 (both families, both states; 3e-6 for the
                        exactly-zero key bias gradient against its floor), a margin of >= 30x.
                        A LayerNorm term off by C/(C-1) (7% for C = 16) or GELU's cubic-term
                        derivative off by 1/3 is >= 10x over (see the mutations in README.md).
  AdamW params, m, v    1e-5. Both sides apply the same (C++) gradients, so only the rounding of one
                        short multiply-add chain per element remains; measured <= 2e-7. An update
                        is lr*O(1) ~ 3e-3 of params ~ 0.5..1, so a wrong bias correction, clip
                        factor, decay group or eps placement (printed: how far moving eps before
                        the bias correction of v would move the params) is >= 1e-2 of the scale.
The complex-step reference itself has error ~1e-15 relative; the dump is float32, read exactly.
Exit status 0 when every tensor is within tolerance, 1 with a per-tensor report otherwise.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

TOL_FORWARD = 1e-5
TOL_GRAD = 1e-4
TOL_ADAM = 1e-5
H_STEP = 1e-20
FLOOR = 1e-2  # see Report.check_all
CHUNK = 512  # coordinates perturbed together (a leading batch dimension)


def load(path, shape, dtype="<f4"):
    a = np.fromfile(path, dtype=dtype)
    if a.size != int(np.prod(shape)):
        sys.exit(f"{path}: {a.size} values, expected shape {shape}")
    return a.reshape(shape).astype(np.float64 if dtype == "<f4" else np.int64)


class Case:
    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.m = json.loads((self.root / "manifest.json").read_text())
        self.cfg = self.m["config"]
        self.B, self.T = self.m["B"], self.m["T"]
        self.specs = {p["name"]: p for p in self.m["params"]}
        n = self.B * self.T
        self.inputs = load(self.root / "inputs.i32", (self.B, self.T), "<i4")
        self.targets = load(self.root / "targets.i32", (n,), "<i4")

    def tensors(self, sub):
        return {k: load(self.root / sub / f"{k}.f32", s["shape"]) for k, s in self.specs.items()}


# ---- the model, from the definitions. Every parameter may carry a leading batch dimension K
# (one perturbed copy per coordinate); activations pick it up by broadcasting. ----

def rows(w, ndim_param):
    """Insert the token axis into a batched (K, ...) per-feature parameter."""
    return w[:, None] if w.ndim > ndim_param else w


def linear(x, w, b=None):
    if w.ndim == 2:
        y = (x.reshape(-1, x.shape[-1]) @ w.T).reshape(x.shape[:-1] + (w.shape[0],))
    elif x.ndim == 2:  # one input, K weights: a single (N, C) x (C, K*OC) product
        y = (x @ w.reshape(-1, w.shape[-1]).T).reshape(x.shape[0], w.shape[0], w.shape[1]).swapaxes(0, 1)
    else:
        y = np.matmul(x, np.swapaxes(w, -1, -2))
    return y if b is None else y + rows(b, 1)


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(-1, keepdims=True)
    return d / np.sqrt(var + eps) * rows(w, 1) + rows(b, 1)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * rows(w, 1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)))


def rope(x, theta):
    """x: (..., B, T, heads, D); HF rotate-half pairs (j, j + D/2), angle t * theta^(-2j/D)."""
    T, D = x.shape[-3], x.shape[-1]
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, D/2)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def attention(qkv, cfg, B, T):
    H, Hkv = cfg["n_heads"], cfg["n_kv_heads"]
    D = cfg["d_model"] // H
    lead = qkv.shape[:-2]
    qkv = qkv.reshape(lead + (B, T, (H + 2 * Hkv) * D))
    q = qkv[..., : H * D].reshape(lead + (B, T, H, D))
    k = qkv[..., H * D: (H + Hkv) * D].reshape(lead + (B, T, Hkv, D))
    v = qkv[..., (H + Hkv) * D:].reshape(lead + (B, T, Hkv, D))
    if cfg["position"] == "rope":
        q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
    # Query head h reads kv head h // (H / Hkv): split the query heads as (Hkv, H / Hkv).
    q = q.reshape(lead + (B, T, Hkv, H // Hkv, D)).transpose(*range(len(lead)), -5, -3, -2, -4, -1)
    k = np.swapaxes(k, -3, -2)[..., None, :, :]  # (..., B, Hkv, 1, T, D)
    v = np.swapaxes(v, -3, -2)[..., None, :, :]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(D)  # (..., B, Hkv, H / Hkv, T, T)
    causal = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(causal, s, 0.0)
    p = np.exp(s - np.where(causal, s.real, -np.inf).max(-1, keepdims=True)) * causal
    p = p / p.sum(-1, keepdims=True)
    o = np.matmul(p, v)  # (..., B, Hkv, H / Hkv, T, D) → (..., B, T, H, D)
    return o.transpose(*range(len(lead)), -5, -2, -4, -3, -1).reshape(lead + (B * T, H * D))


def logits_of(P, case):
    cfg, B, T = case.cfg, case.B, case.T
    V, eps = cfg["vocab_size"], cfg["norm_eps"]
    tok = case.inputs.reshape(-1)
    x = P["embed.wte"][..., tok, :]
    if cfg["position"] == "learned":
        x = x + P["embed.wpe"][..., np.tile(np.arange(T), B), :]

    def norm(x, prefix):
        if cfg["norm"] == "layernorm":
            return layernorm(x, P[prefix + ".weight"], P[prefix + ".bias"], eps)
        return rmsnorm(x, P[prefix + ".weight"], eps)

    def lin(x, prefix):
        return linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))

    for layer in range(cfg["n_layers"]):
        L = f"layers.{layer}"
        a = attention(lin(norm(x, L + ".attn_norm"), L + ".attn.qkv"), cfg, B, T)
        x = x + lin(a, L + ".attn.proj")
        u = lin(norm(x, L + ".mlp_norm"), L + ".mlp.fc")
        if cfg["activation"] == "gelu":
            h = gelu_tanh(u)
        else:
            F = cfg["d_ff"]
            g = u[..., :F]
            h = g / (1.0 + np.exp(-g)) * u[..., F:]
        x = x + lin(h, L + ".mlp.proj")
    x = norm(x, "final_norm")
    head = P["embed.wte"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    return linear(x, head[..., :V, :])  # only the real vocabulary: padding is outside the softmax


def loss_of(P, case):
    z = logits_of(P, case)
    m = z.real.max(-1, keepdims=True)
    lse = np.log(np.exp(z - m).sum(-1)) + m[..., 0]
    picked = z[..., np.arange(case.targets.size), case.targets]
    return (lse - picked).mean(-1)


def complex_step_grads(P, case):
    Pc = {k: v.astype(np.complex128) for k, v in P.items()}
    grads = {}
    for name, w in P.items():
        g = np.zeros(w.size)
        valid = case.specs[name]["valid_rows"] * (w.size // w.shape[0])  # padded rows: exactly 0
        for start in range(0, valid, CHUNK):
            idx = np.arange(start, min(start + CHUNK, valid))
            pert = np.repeat(Pc[name].reshape(1, -1), idx.size, axis=0)
            pert[np.arange(idx.size), idx] += 1j * H_STEP
            Q = dict(Pc)
            Q[name] = pert.reshape((idx.size,) + w.shape)
            g[idx] = loss_of(Q, case).imag / H_STEP
        grads[name] = g.reshape(w.shape)
    return grads


# ---- AdamW, torch.optim.AdamW after clip_grad_norm_ ----

def decays(name, o):
    if name.startswith("embed."):
        return o["decay_embeddings"]
    if name.endswith(".bias") or name.endswith("norm.weight"):
        return o["decay_norms_and_biases"]
    return True


def adamw_steps(p0, grads, o):
    p = {k: v.copy() for k, v in p0.items()}
    m = {k: np.zeros_like(v) for k, v in p0.items()}
    v = {k: np.zeros_like(x) for k, x in p0.items()}
    out = []
    for t, (g, lr) in enumerate(zip(grads, o["lr"]), start=1):
        norm = np.sqrt(sum((x * x).sum() for x in g.values()))
        scale = min(1.0, o["grad_clip"] / (norm + 1e-6)) if o["grad_clip"] > 0 else 1.0
        b1, b2, eps = o["beta1"], o["beta2"], o["eps"]
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        eps_moved = 0.0  # largest change if eps were added before the bias correction of v
        for k in p:
            gk = g[k] * scale
            if decays(k, o):
                p[k] = p[k] * (1 - lr * o["weight_decay"])
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            step = lr / bc1 * m[k] / (np.sqrt(v[k]) / np.sqrt(bc2) + eps)
            other = lr / bc1 * m[k] / ((np.sqrt(v[k]) + eps) / np.sqrt(bc2))
            p[k] = p[k] - step
            eps_moved = max(eps_moved, np.abs(step - other).max() / np.abs(p[k]).max())
        out.append(({k: x.copy() for k, x in p.items()}, {k: x.copy() for k, x in m.items()},
                    {k: x.copy() for k, x in v.items()}, scale, eps_moved))
    return out


# ---- comparison ----

def parts(name, cfg):
    """The row blocks of a parameter compared as separate tensors: q, k and v of qkv, gate and up of
    a SwiGLU fc (at init the q and k gradients are ~100x smaller than v's, so one scale for the
    whole qkv would hide them)."""
    H, Hkv, F = cfg["n_heads"], cfg["n_kv_heads"], cfg["d_ff"]
    D = cfg["d_model"] // H
    if ".attn.qkv." in name:
        return [("q", slice(0, H * D)), ("k", slice(H * D, (H + Hkv) * D)), ("v", slice((H + Hkv) * D, None))]
    if ".mlp.fc." in name and cfg["activation"] == "swiglu":
        return [("gate", slice(0, F)), ("up", slice(F, None))]
    return [("", slice(None))]


class Report:
    def __init__(self, cfg):
        self.cfg = cfg
        self.failures = []

    def check_all(self, what, got, ref, tol):
        """Every parameter's tensor (or part); the scale has a floor of FLOOR x the largest entry
        of all of them, so an exactly-zero reference (a key bias's gradient without RoPE: the
        softmax ignores q.b_k, while float32 sums B*T terms that cancel) is compared at the rounding
        level of the whole gradient. Every other part's largest gradient is >= 2e-2 of the largest
        of all here, so the floor takes no resolution from them."""
        floor = FLOOR * max(np.abs(r).max() for r in ref.values())
        return max(self.check(f"{what} {name}" + (f"[{label}]" if label else ""), got[name][rows], ref[name][rows],
                              tol, floor)
                   for name in ref for label, rows in parts(name, self.cfg))

    def check(self, what, got, ref, tol, floor=0.0):
        scale = max(np.abs(ref).max(), floor)
        err = np.abs(got - ref).max() / (scale if scale > 0 else 1.0)
        ok = err <= tol
        if not ok:
            k = np.unravel_index(np.abs(got - ref).argmax(), ref.shape)
            self.failures.append(f"{what}: err {err:.3e} > tol {tol:.0e} (scale {scale:.3e}; worst at "
                                 f"{tuple(int(i) for i in k)}: got {got[k]:.9e}, reference {ref[k]:.9e})")
        return err


def check_state(case, sub, rep):
    P = case.tensors(f"{sub}/params")
    V, N = case.cfg["vocab_size"], case.B * case.T
    z = logits_of(P, case)
    got_z = load(case.root / sub / "logits.f32", case.m["logits_shape"])[:, :V]
    e_z = rep.check(f"{sub} logits", got_z, z, TOL_FORWARD)
    loss = loss_of(P, case)
    got_loss = load(case.root / sub / "loss.f32", (1,))[0]
    e_l = rep.check(f"{sub} loss", np.array(got_loss), np.array(loss), TOL_FORWARD)
    t0 = time.time()
    ref_g = complex_step_grads(P, case)
    got_g = case.tensors(f"{sub}/grads")
    e_g = rep.check_all(f"{sub} grad", got_g, ref_g, TOL_GRAD)
    print(f"  {sub}: loss {loss:.6f} (C++ {got_loss:.6f}); logits err {e_z:.1e}, loss err {e_l:.1e}, "
          f"max grad err {e_g:.1e} over {len(ref_g)} tensors ({time.time() - t0:.1f} s complex step, N = {N})")
    return P, got_g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump-tool", help="dump_gpt_case executable (omit to reuse --out as it is)")
    ap.add_argument("--family", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--out", required=True, help="dump folder")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    if args.dump_tool:
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([args.dump_tool, args.family, str(out)], check=True)
    case = Case(out)
    if case.m["family"] != args.family:
        sys.exit(f"{out}: dump of {case.m['family']}, asked for {args.family}")
    print(f"gpt_reference {args.family}: {json.dumps(case.cfg)}, B = {case.B}, T = {case.T}")
    rep = Report(case.cfg)
    p0, g0 = check_state(case, "s0", rep)
    _, g1 = check_state(case, "s1", rep)
    for o in case.m["optimizers"]:
        errs = []
        for t, (p, m, v, scale, eps_moved) in enumerate(adamw_steps(p0, [g0, g1], o), start=1):
            sub = f"{o['name']}/step{t}"
            for kind, ref in (("params", p), ("exp_avg", m), ("exp_avg_sq", v)):
                errs.append(rep.check_all(f"{sub} {kind}", case.tensors(f"{sub}/{kind}"), ref, TOL_ADAM))
            print(f"  {sub}: clip scale {scale:.4f}, eps placement would move params by {eps_moved:.1e} "
                  f"of scale")
        print(f"  {o['name']}: max err {max(errs):.1e} (params, exp_avg, exp_avg_sq, both steps)")
    if rep.failures:
        print(f"FAIL: {len(rep.failures)} tensors differ from the float64 reference:")
        for f in rep.failures:
            print("  " + f)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
