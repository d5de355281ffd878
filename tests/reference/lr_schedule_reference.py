"""megatrain's learning-rate schedules against Megatron-Core's own OptimizerParamScheduler
(megatron/core/optimizer_param_scheduler.py of the installed megatron-core, or MEGATRON_LM_DIR's):
`megatrain train` runs a tiny model and logs the learning rate of every step (log.interval 1); for
step t it must equal Megatron's get_lr() after t calls of step(1) (init_lr 0, lr_decay_steps = the
decay steps, the same warmup, min_lr and lr), within 2e-7 relative: megatrain computes it in
double and the optimizer takes it as float32, as the metrics print it (half an ulp is 6e-8).

Runs: cosine and linear decay (warmup, then decay, then min_lr past the decay steps), and WSD with
each of Megatron's four final-decay shapes (linear, cosine, exponential, minus_sqrt). Then WSD
extended: a run of 30 steps saved at step 10 is resumed with train.steps = 45, and steps 11-45 must
follow the 45-step schedule — the stable phase lengthened, the decay at the new end — while the
first run's steps 1-10 follow the 30-step one.

The module imports megatron.core.utils, which pulls in the whole megatron.core package (and a
torch.distributed newer than Debian's 1.13 has); its one use there is a logging helper, so a stub
module with that helper is put in its place. Nothing else of the module is changed.

Usage: lr_schedule_reference.py --megatrain BIN --out DIR
"""
import json
import os
import sys
import types

from megatron_roots import load_megatron_file
from ref_process import Mismatch, preprocess_text, run, text_run_args

TOL = 2e-7
LR, MIN_LR, WARMUP = 1e-3, 1e-4, 4
MODEL = """[model]
n_layers = 1
d_model = 16
n_heads = 2
vocab_size = 257
max_seq_len = 16
[train]
seq_len = 16
micro_batch_size = 2
global_batch_size = 2
eval_interval = 0
[log]
interval = 1
"""


def megatron_scheduler_class():
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = lambda logger, level, *args, **kwargs: logger.log(level, *args, **kwargs)
    sys.modules.setdefault("megatron", types.ModuleType("megatron"))
    sys.modules.setdefault("megatron.core", types.ModuleType("megatron.core"))
    sys.modules["megatron.core.utils"] = utils
    module = load_megatron_file("megatron_optimizer_param_scheduler", "core", "optimizer_param_scheduler.py")
    return module.OptimizerParamScheduler


class NoOptimizer:
    param_groups = [{}]  # the scheduler writes lr and weight_decay into each group


def megatron_lrs(cls, decay, decay_steps, steps, wsd_steps=None, wsd_style=None):
    style = {"cosine": "cosine", "linear": "linear", "wsd": "WSD"}[decay]
    s = cls(NoOptimizer(), init_lr=0.0, max_lr=LR, min_lr=MIN_LR, lr_warmup_steps=WARMUP, lr_decay_steps=decay_steps,
            lr_decay_style=style, start_wd=0.0, end_wd=0.0, wd_incr_steps=1, wd_incr_style="constant",
            wsd_decay_steps=wsd_steps, lr_wsd_decay_style=wsd_style)
    out = []
    for _ in range(steps):
        s.step(1)
        out.append(s.get_lr({}))
    return out


def megatrain_lrs(args, name, sets):
    work = os.path.join(args.out, name)
    os.makedirs(work)
    config, metrics = os.path.join(work, "run.toml"), os.path.join(work, "metrics.jsonl")
    with open(config, "w") as f:
        f.write(MODEL)
    cmd = [args.megatrain, "train", "--config", config, "--set", f'data.train="{args.data}"',
           "--set", f'log.metrics_file="{metrics}"', "--set", f"optimizer.lr={LR}", "--set", f"optimizer.min_lr={MIN_LR}",
           "--set", f"optimizer.warmup_steps={WARMUP}"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run(*cmd)
    return {r["step"]: r["lr"] for r in map(json.loads, open(metrics)) if "lr" in r}


def compare(name, got, want, steps):
    for t in steps:
        if t not in got:
            raise Mismatch(f"{name}: megatrain's metrics have no learning rate for step {t}")
        if abs(got[t] - want[t - 1]) > TOL * max(want[t - 1], MIN_LR):
            raise Mismatch(f"{name}, step {t}: megatrain's lr {got[t]!r}, Megatron-Core's {want[t - 1]!r}")
    print(f"{name}: steps {steps[0]}-{steps[-1]} equal Megatron-Core's learning rates "
          f"({want[steps[0] - 1]:.3g} … {want[steps[-1] - 1]:.3g})")


def main():
    args = text_run_args(__doc__)
    try:
        cls = megatron_scheduler_class()
        args.data = preprocess_text(args, "the learning rate of every step, against the reference's. " * 200)
        for decay in ("cosine", "linear"):  # decay over 24 steps, then min_lr to step 30
            got = megatrain_lrs(args, decay, {"train.steps": 30, "optimizer.decay": f'"{decay}"',
                                              "optimizer.decay_steps": 24})
            compare(decay, got, megatron_lrs(cls, decay, 24, 30), list(range(1, 31)))
        for shape in ("linear", "cosine", "exponential", "minus_sqrt"):
            got = megatrain_lrs(args, "wsd_" + shape, {"train.steps": 30, "optimizer.decay": '"wsd"',
                                                       "optimizer.wsd_decay_steps": 8,
                                                       "optimizer.wsd_decay_style": f'"{shape}"'})
            compare(f"wsd {shape}", got, megatron_lrs(cls, "wsd", 30, 30, 8, shape), list(range(1, 31)))
        # Extending the stable phase: save at step 10 of a 30-step run, resume with 45 steps.
        ckpt = os.path.join(args.out, "extend_ckpt")
        wsd = {"optimizer.decay": '"wsd"', "optimizer.wsd_decay_steps": 8, "optimizer.wsd_decay_style": '"linear"',
               "checkpoint.dir": f'"{ckpt}"', "checkpoint.save_interval": 10}
        first = megatrain_lrs(args, "extend_first", {**wsd, "train.steps": 30})
        compare("wsd, first run of 30 steps", first, megatron_lrs(cls, "wsd", 30, 30, 8, "linear"), list(range(1, 11)))
        resumed = megatrain_lrs(args, "extend_resumed", {**wsd, "train.steps": 45, "checkpoint.dir": f'"{ckpt}_2"',
                                                          "checkpoint.load": f'"{ckpt}/step_0000010"'})
        if min(resumed) != 11:
            raise Mismatch(f"the resumed run's first logged step is {min(resumed)}, not 11")
        compare("wsd, resumed at step 10 with 45 steps", resumed, megatron_lrs(cls, "wsd", 45, 45, 8, "linear"),
                list(range(11, 46)))
    except Mismatch as e:
        print(f"FAIL: {e}\n(work files kept in {args.out})")
        return 1
    print("OK: megatrain's learning-rate schedules equal Megatron-Core's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
