"""megatrain's batch-size ramp-up (train.rampup_batch_size) against Megatron-Core's own classes:
RampupBatchsizeNumMicroBatchesCalculator (megatron/core/num_microbatches_calculator.py) driven as
Megatron's training loop drives it — update(consumed_samples) before each iteration, then the
iteration's global batch added to consumed_samples — and OptimizerParamScheduler stepped by each
iteration's samples, as Megatron's loop steps it, with the warmup and decay given in samples (the
samples of the first W and Dn iterations: what a Megatron user sets as --lr-warmup-samples and
--lr-decay-samples for the same run).

`megatrain train` logs each step (log.interval 1) and its sample log; every step's global batch
size, consumed samples and sample count must equal Megatron's exactly, and its learning rate
within 2e-7 relative (megatrain's lr for step t is Megatron's get_lr() after t scheduler steps, as
lr_schedule_reference.py checks for a constant batch; float32 in the metrics).

Runs: a ramp [4, 4, 40] to 16 with cosine decay; a ramp [1, 1, 5] to 4 whose samples per increment
(5/3) are not whole, with a WSD decay (minus_sqrt); and a ramp [8, 8, 150] to 40 (4 increments of 37.5) longer
than the run, with linear decay.

Usage: batch_ramp_reference.py --megatrain BIN --out DIR
"""
import json
import os
import sys

from lr_schedule_reference import NoOptimizer, megatron_scheduler_class
from megatron_roots import load_megatron_file
from ref_process import Mismatch, preprocess_text, run, text_run_args

TOL = 2e-7
LR, MIN_LR = 1e-3, 1e-4
MODEL = """[model]
n_layers = 1
d_model = 16
n_heads = 2
vocab_size = 257
max_seq_len = 16
[train]
seq_len = 16
eval_interval = 0
[log]
interval = 1
"""


def megatron_calculator_class():
    module = load_megatron_file("megatron_num_microbatches_calculator", "core", "num_microbatches_calculator.py")
    return module.RampupBatchsizeNumMicroBatchesCalculator


def megatron_run(calc_cls, sched_cls, case):
    """Megatron's loop: (global batch, consumed samples after it, lr after its scheduler step) per iteration."""
    start, increment, samples = case["ramp"]
    calc = calc_cls(global_batch_size=case["global"], micro_batch_size=case["micro"], data_parallel_size=1,
                    decrease_batch_size_if_needed=False, rank=0, start_global_batch_size=start,
                    batch_size_increment=increment, ramup_samples=samples)
    sizes, consumed = [], [0]
    for _ in range(case["steps"]):
        calc.update(consumed[-1], True)
        sizes.append(calc.get_current_global_batch_size())
        consumed.append(consumed[-1] + sizes[-1])
    decay = consumed[case["steps"]]
    wsd = case.get("wsd_steps")
    style = {"cosine": "cosine", "linear": "linear", "wsd": "WSD"}[case["decay"]]
    s = sched_cls(NoOptimizer(), init_lr=0.0, max_lr=LR, min_lr=MIN_LR, lr_warmup_steps=consumed[case["warmup"]],
                  lr_decay_steps=decay, lr_decay_style=style, start_wd=0.0, end_wd=0.0, wd_incr_steps=1,
                  wd_incr_style="constant", wsd_decay_steps=decay - consumed[case["steps"] - wsd] if wsd else None,
                  lr_wsd_decay_style=case.get("wsd_style"))
    lrs = []
    for g in sizes:
        s.step(g)
        lrs.append(s.get_lr({}))
    return sizes, consumed[1:], lrs


def megatrain_run(args, case):
    work = os.path.join(args.out, case["name"])
    os.makedirs(work)
    config, metrics, samples = (os.path.join(work, f) for f in ("run.toml", "metrics.jsonl", "samples.jsonl"))
    with open(config, "w") as f:
        f.write(MODEL)
    sets = {"data.train": f'"{args.data}"', "log.metrics_file": f'"{metrics}"', "log.samples_file": f'"{samples}"',
            "optimizer.lr": LR, "optimizer.min_lr": MIN_LR, "optimizer.warmup_steps": case["warmup"],
            "optimizer.decay": f'"{case["decay"]}"', "train.steps": case["steps"],
            "train.micro_batch_size": case["micro"], "train.global_batch_size": case["global"],
            "train.rampup_batch_size": "[{}]".format(", ".join(map(str, case["ramp"])))}
    if "wsd_steps" in case:
        sets["optimizer.wsd_decay_steps"] = case["wsd_steps"]
        sets["optimizer.wsd_decay_style"] = f'"{case["wsd_style"]}"'
    cmd = [args.megatrain, "train", "--config", config]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run(*cmd)
    rows = {r["step"]: r for r in map(json.loads, open(metrics)) if "lr" in r}
    logged = {r["step"]: r["samples"] for r in map(json.loads, open(samples))}
    return rows, logged


def compare(case, rows, logged, sizes, consumed, lrs):
    name = case["name"]
    for t in range(1, case["steps"] + 1):
        if t not in rows:
            raise Mismatch(f"{name}: megatrain's metrics have no row for step {t}")
        r, i = rows[t], t - 1
        if (r["global_batch_size"], r["consumed_samples"], logged.get(t)) != (sizes[i], consumed[i], sizes[i]):
            raise Mismatch(f"{name}, step {t}: megatrain's global batch {r['global_batch_size']}, consumed samples "
                           f"{r['consumed_samples']}, samples read {logged.get(t)}; Megatron-Core's batch {sizes[i]}, "
                           f"consumed {consumed[i]}")
        if abs(r["lr"] - lrs[i]) > TOL * max(lrs[i], MIN_LR):
            raise Mismatch(f"{name}, step {t}: megatrain's lr {r['lr']!r}, Megatron-Core's {lrs[i]!r}")
    print(f"{name}: {case['steps']} steps equal Megatron-Core's — batches {sizes}, lr {lrs[0]:.3g} … {lrs[-1]:.3g}")


CASES = [
    {"name": "ramp_cosine", "ramp": (4, 4, 40), "global": 16, "micro": 2, "steps": 20, "warmup": 5, "decay": "cosine"},
    {"name": "ramp_fractional_wsd", "ramp": (1, 1, 5), "global": 4, "micro": 1, "steps": 20, "warmup": 3,
     "decay": "wsd", "wsd_steps": 6, "wsd_style": "minus_sqrt"},
    {"name": "ramp_past_the_run", "ramp": (8, 8, 150), "global": 40, "micro": 8, "steps": 10, "warmup": 2,
     "decay": "linear"},
]


def main():
    args = text_run_args(__doc__)
    try:
        calc_cls, sched_cls = megatron_calculator_class(), megatron_scheduler_class()
        args.data = preprocess_text(args, "the batch of every step, against the reference's. " * 400)
        for case in CASES:
            compare(case, *megatrain_run(args, case), *megatron_run(calc_cls, sched_cls, case))
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {args.out})")
        return 1
    print("OK: megatrain's batch ramp-up equals Megatron-Core's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
