"""The metrics files of the end-to-end benchmarks (bench/run_cases.sh writes DIR/CASE_rREP.jsonl)."""
import glob
import json
import os
import re


def load_runs(d, warm, keys, stat=None):
    """Per case, one dict per run: the mean (or stat, e.g. statistics.median) over the steps > warm
    of each of `keys`, "memory" (the last of those steps' memory_bytes), "loss" (every step's),
    "rep" (REP of the file name) and "path" (the metrics file). Runs without a step past warm are
    left out."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(d, "*_r*.jsonl"))):
        case = re.sub(r"_r\d+\.jsonl$", "", os.path.basename(path))
        lines = [json.loads(l) for l in open(path) if '"step_time_ms"' in l]
        kept = [m for m in lines if m["step"] > warm]
        if not kept:
            continue
        r = {k: stat([m[k] for m in kept]) if stat else sum(m[k] for m in kept) / len(kept) for k in keys}
        r["rep"] = int(re.search(r"_r(\d+)\.jsonl$", path).group(1))
        r["memory"] = kept[-1]["memory_bytes"]
        r["loss"] = [m["loss"] for m in lines]
        r["path"] = path
        rows.setdefault(case, []).append(r)
    return rows
