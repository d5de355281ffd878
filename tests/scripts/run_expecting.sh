#!/usr/bin/env bash
# A smoke test of a benchmark that holds to both halves of "it ran":
#   run_expecting.sh REGEX COMMAND [ARG...]
# runs COMMAND, prints its output, and passes only when it exits 0 *and* its output matches the
# extended regular expression REGEX. (CTest's PASS_REGULAR_EXPRESSION alone ignores the exit code,
# so a benchmark that printed its line and then crashed would pass.)
set -uo pipefail
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "run_expecting: '$*' exited $rc" >&2
  exit 1
fi
if ! grep -qE -- "$regex" <<<"$out"; then
  echo "run_expecting: the output of '$*' has no line matching /$regex/" >&2
  exit 1
fi
