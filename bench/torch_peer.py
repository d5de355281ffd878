"""One PyTorch case of bench/torch_peer.sh: GPT-2 124M (configs/gpt2_124m.toml's shape: 12 layers,
d_model 768, 12 heads, vocabulary 50257 padded to 50304, learned positions, LayerNorm, GELU (tanh),
biases, tied embeddings, no dropout) trained with torch.optim.AdamW(fused=True) on random token ids,
attention through F.scaled_dot_product_attention (causal). Times --warmup + --steps optimizer steps
(forward, backward, clipping at 1.0, update) and prints one JSON line: the case and each timed
step's milliseconds.
  torch_peer.py --mode eager|compile --precision fp32|bf16 --batch B --seq T --threads N
bf16 is torch.autocast("cpu", dtype=torch.bfloat16) over forward and loss, float32 weights and
optimizer state: the same split as megatrain's train.precision = "bf16"."""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, C, H, V, VP, CTX = 12, 768, 12, 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(CTX, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.head = nn.Linear(C, VP, bias=False)
        self.head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x)).float()
        return F.cross_entropy(logits.view(-1, VP), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("eager", "compile"), required=True)
    ap.add_argument("--precision", choices=("fp32", "bf16"), required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = Gpt()
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = torch.compile(model) if a.mode == "compile" else model
    idx = torch.randint(0, V, (a.batch, a.seq))
    tgt = torch.randint(0, V, (a.batch, a.seq))
    times = []
    t_first, warm_s = time.perf_counter(), 0.0
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"step {s + 1}/{a.warmup + a.steps}: {ms:.0f} ms", file=sys.stderr, flush=True)
        if s >= a.warmup:
            times.append(ms)
        if s == a.warmup - 1:
            warm_s = time.perf_counter() - t_first
    print(json.dumps({"case": f"torch {a.mode} {a.precision}", "batch": a.batch, "seq": a.seq,
                      "torch": torch.__version__, "warmup_s": round(warm_s, 1), "loss": loss.item(),
                      "step_ms": [round(t, 1) for t in times]}))


if __name__ == "__main__":
    main()
