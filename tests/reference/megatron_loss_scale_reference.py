#!/usr/bin/python3
"""megatrain's fp16 dynamic loss scaler (trainer/loss_scaler.h) against Megatron-Core's own
DynamicGradScaler (megatron/core/optimizer/grad_scaler.py, the megatron-core package pinned in
scripts/requirements-ref-nodeps.txt, or MEGATRON_LM_DIR's checkout).

For several settings (initial and minimum scale, growth and backoff factors, growth interval,
hysteresis) and seeded random overflow patterns (runs of overflows included), the scale after every
step must equal Megatron's exactly. Megatron clamps at the minimum scale and goes on skipping; megatrain
stops instead (DeepSpeed's rule): the trace must say "collapse" at the first step where Megatron's
update backs off while its scale is already at the minimum, and nowhere else. Megatron keeps the scale
in a float32 tensor, which long clean runs grow past float32's range to inf (where it stays, as
inf · backoff = inf); megatrain's is a double, so traces are compared up to Megatron's first inf.

Usage: python3 megatron_loss_scale_reference.py LOSS_SCALE_TRACE_BINARY
Only grad_scaler.py is loaded (its package __init__ needs a newer torch than Debian's); it puts its
tensors on CUDA, so torch.tensor is given to it without the device argument (CPU).
Exit status: 0 all equal; 1 a mismatch or a missing reference.
"""
import importlib.util
import os
import random
import subprocess
import sys
import types

from megatron_roots import megatron_roots


def load_grad_scaler():
    roots, origin = megatron_roots()
    paths = [os.path.join(r, "core", "optimizer", "grad_scaler.py") for r in roots]
    paths = [p for p in paths if os.path.isfile(p)]
    if not paths:
        raise ImportError(f"no megatron/core/optimizer/grad_scaler.py in {origin}")
    import torch
    spec = importlib.util.spec_from_file_location("megatron_grad_scaler", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cpu = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    cpu.tensor = lambda data, dtype=None, device=None: torch.tensor(data, dtype=dtype)
    module.torch = cpu
    return module.DynamicGradScaler, f"{origin}: {paths[0]}"


def megatron_trace(Scaler, setting, flags):
    initial, minimum, growth, backoff, interval, hysteresis = setting
    s = Scaler(initial_scale=initial, min_scale=minimum, growth_factor=growth, backoff_factor=backoff,
               growth_interval=interval, hysteresis=hysteresis)
    out = []
    for f in flags:
        at_min = float(s.scale.item()) <= minimum
        if f == "1" and s._hysteresis_tracker - 1 <= 0 and at_min:
            out.append("collapse")
            break
        s.update(f == "1")
        out.append(repr(float(s.scale.item())))
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 1
    try:
        Scaler, origin = load_grad_scaler()
    except Exception as e:  # noqa: BLE001 -- any import failure means the reference is missing
        print(f"FAIL: the reference is missing: {type(e).__name__}: {e}\n"
              "Run scripts/setup.sh (megatron-core into build/pyref) or set MEGATRON_LM_DIR.")
        return 1
    # (initial, min, growth, backoff, growth interval, hysteresis); float32-exact values, as
    # Megatron keeps the scale in a float32 tensor.
    settings = [(65536.0, 1.0, 2.0, 0.5, 5, 2), (1024.0, 1.0, 2.0, 0.5, 3, 1), (2.0 ** 32, 1.0, 2.0, 0.5, 1000, 2),
                (4096.0, 256.0, 4.0, 0.25, 4, 3), (8.0, 2.0, 2.0, 0.5, 2, 1)]
    rng = random.Random(20261123)
    cases = collapses = 0
    for setting in settings:
        for trial in range(40):
            p = rng.choice([0.05, 0.2, 0.5, 0.8])
            flags = "".join("1" if rng.random() < p else "0" for _ in range(rng.randint(1, 300)))
            want = megatron_trace(Scaler, setting, flags)
            if "inf" in want:
                want = want[:want.index("inf")]
            args = [argv[1]] + [repr(float(v)) if isinstance(v, float) else str(v) for v in setting] + [flags]
            got = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
            got = [g if g == "collapse" else repr(float(g)) for g in got][:len(want)]
            if got != want:
                i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                print(f"FAIL: setting {setting}, flags {flags}: step {i + 1}: megatrain {got[i:i + 3]}, "
                      f"Megatron {want[i:i + 3]} ({origin})")
                return 1
            cases += 1
            collapses += bool(want) and want[-1] == "collapse"
    if collapses == 0 or collapses == cases:
        print(f"FAIL: the patterns exercised collapse in {collapses} of {cases} cases; adjust them")
        return 1
    print(f"OK: {cases} overflow patterns over {len(settings)} settings equal Megatron-Core's DynamicGradScaler "
          f"({origin}) step by step; {collapses} end in the collapse error")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
