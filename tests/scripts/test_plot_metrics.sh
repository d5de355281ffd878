#!/usr/bin/env bash
# Checks scripts/plot_metrics.py: two small runs plot to a non-empty PNG, and a malformed file
# exits with status 2 naming the offending line.
#   tests/scripts/test_plot_metrics.sh        (from the repository root or anywhere)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
script="$root/scripts/plot_metrics.py"
py=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Run A: val_loss on separate lines, one null mfu, one unknown key, a blank line.
cat > "$tmp/run_a.jsonl" <<'JSON'
{"step": 1, "loss": 10.9, "lr": 0.0001, "grad_norm": 5.1, "tokens_per_s": 1200.0, "step_time_ms": 210.0, "mfu": null}
{"step": 2, "loss": 9.8, "lr": 0.0002, "grad_norm": 3.2, "tokens_per_s": 1350.0, "step_time_ms": 190.0, "mfu": 0.01}

{"step": 2, "val_loss": 9.9}
{"step": 3, "loss": 8.7, "lr": 0.0003, "grad_norm": 2.0, "tokens_per_s": 1340.0, "step_time_ms": 191.0, "mfu": 0.01, "note": "x"}
{"step": 4, "loss": 8.1, "lr": 0.0003, "grad_norm": 1.5, "tokens_per_s": 1360.0, "step_time_ms": 188.0, "mfu": 0.01}
{"step": 4, "val_loss": 8.3}
JSON
# Run B: val_loss as a key on training lines.
cat > "$tmp/run_b.jsonl" <<'JSON'
{"step": 1, "loss": 11.0, "lr": 0.0002, "grad_norm": 6.0, "tokens_per_s": 900.0, "step_time_ms": 280.0, "mfu": null}
{"step": 2, "loss": 9.5, "lr": 0.0004, "grad_norm": 2.5, "tokens_per_s": 950.0, "step_time_ms": 270.0, "mfu": null, "val_loss": 9.6}
{"step": 3, "loss": 8.2, "lr": 0.0004, "grad_norm": 1.1, "tokens_per_s": 960.0, "step_time_ms": 268.0, "mfu": null, "val_loss": 8.4}
JSON

"$py" "$script" "$tmp/run_a.jsonl" "$tmp/run_b.jsonl" -o "$tmp/curves.png" || fail "plot_metrics.py exited $?"
[ -s "$tmp/curves.png" ] || fail "curves.png missing or empty"
head -c 8 "$tmp/curves.png" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a$' || fail "curves.png is not a PNG"

# Malformed line 3 (line 2 is fine, line 1 is blank).
printf '\n{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n' > "$tmp/bad.jsonl"
set +e
msg="$("$py" "$script" "$tmp/bad.jsonl" -o "$tmp/bad.png" 2>&1)"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "malformed file: exit status $rc, want 2 (output: $msg)"
grep -q 'bad.jsonl:3' <<<"$msg" || fail "malformed file: message does not name bad.jsonl line 3: $msg"
[ ! -e "$tmp/bad.png" ] || fail "malformed file still wrote a PNG"

echo "PASS: plot_metrics.py"
