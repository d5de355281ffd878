# Shared parts of bench/gpu/device_check.sh (sourced): the deadline, time-boxed stages that record
# their result as they finish, the summary, and reading the metrics files without Python.
# Globals it reads: deadline_at (epoch seconds), res (result folder), logs (log folder), scratch
# (a folder for data), mode.

# shellcheck source=scripts/gpu_kit/layout.sh
. scripts/gpu_kit/layout.sh

summary_rows=()

left() { echo $((deadline_at - $(date +%s))); }

# The seconds a stage may take: its cap, or what is left before the deadline less a margin for the
# pack at the end (0: no time).
box() {
  local cap=$1 l
  l=$(($(left) - 20))
  [ "$l" -lt "$cap" ] && cap=$l
  [ "$cap" -lt 0 ] && cap=0
  echo "$cap"
}

# run_boxed CAP LOG CMD...: CMD with its output to LOG, killed after CAP seconds (its children too).
# Returns CMD's status; 124 when it ran out of time, 125 when no time was left to start it.
run_boxed() {
  local cap=$1 log=$2
  shift 2
  cap=$(box "$cap")
  if [ "$cap" -le 0 ]; then
    echo "not started: the check's deadline was reached" >>"$log"
    return 125
  fi
  echo "\$ $* (time box ${cap}s)" >>"$log"
  # In the background and waited for, so a signal to the check is handled at once (stop_boxed).
  timeout -k 5 "$cap" "$@" >>"$log" 2>&1 &
  boxed_pid=$!
  wait "$boxed_pid"
}
# Stops the running stage's command (timeout passes the signal on to it).
stop_boxed() { [ -n "${boxed_pid:-}" ] && kill "$boxed_pid" 2>/dev/null; }

# record NAME STATUS SECONDS FIGURES: one summary row, written to summary.txt at once (a killed run
# still leaves every finished stage's row).
record() {
  summary_rows+=("$(printf '%-22s %-8s %5ss  %s' "$1" "$2" "$3" "$4")")
  write_summary
}
write_summary() {
  {
    echo "megatrain device check ($mode), $(date -u +%Y-%m-%dT%H:%M:%SZ), ${device_name:-no GPU}"
    printf '%-22s %-8s %6s  %s\n' stage status time figures
    printf '%s\n' "${summary_rows[@]}"
  } >"$res/summary.txt"
}

# A status word from an exit code: 0 PASS, 77 SKIP, 124/137 TIMEOUT, 125 NOT RUN, else FAIL.
status_of() {
  case "$1" in
    0) echo PASS ;;
    77) echo SKIP ;;
    124|137) echo TIMEOUT ;;
    125) echo "NOT-RUN" ;;
    *) echo FAIL ;;
  esac
}

# GoogleTest's counts in a log: "P passed, F failed, S skipped".
gtest_counts() {
  local p f s
  p=$(grep -c '^\[       OK \]' "$1")
  f=$(grep -c '^\[  FAILED  \] [A-Za-z_0-9./]* (' "$1")
  s=$(grep -c '^\[  SKIPPED \] [A-Za-z_0-9./]* (' "$1")
  echo "$p passed, $f failed, $s skipped"
}
# The names of the tests that failed, ':'-joined for --gtest_filter.
gtest_failed() { sed -n 's/^\[  FAILED  \] \([A-Za-z_0-9./]*\) (.*/\1/p' "$1" | sort -u | paste -sd: -; }

# json_field KEY < LINE: a number of a compact JSON line (the metrics file's), "" when absent.
json_field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9.eE+-]*\).*/\1/p"; }

# median of the numbers on stdin, one per line.
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2];
                                              else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# metrics_median FILE KEY WARMUP: the median of KEY over the steps after WARMUP.
metrics_median() {
  local file=$1 key=$2 warm=$3
  grep '"step_time_ms"' "$file" | while IFS= read -r line; do
    step=$(json_field step <<<"$line")
    [ "${step:-0}" -gt "$warm" ] && json_field "$key" <<<"$line"
  done | median
}

# The kit unpacked (a folder is used as it is): MEGATRAIN_KIT names it and its bin/ leads PATH. Its
# environment (env.sh) is not sourced here: each kit wrapper sources it, so the kit's libraries
# reach only the kit's processes, never nvidia-smi or the image's Python (`kit-env CMD` runs any
# other command, or a function of env.sh, with it).
open_kit() {
  local kit=$1
  if [ -f "$kit" ]; then
    local into=${TMPDIR:-/tmp}/megatrain-kit
    rm -rf "$into" && mkdir -p "$into"
    if [ "${kit%.tar}" != "$kit" ]; then
      tar -C "$into" -xf "$kit" || return 1
    elif command -v xz >/dev/null; then
      xz -dc "$kit" | tar -C "$into" -xf - || return 1
    else
      "$(command -v python3 || echo /opt/torch/.venv/bin/python3)" -c \
        'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit" "$into" || return 1
    fi
    kit=$into/kit
  fi
  [ -f "$kit/env.sh" ] || { echo "no kit at $kit (run bash scripts/gpu_kit/make_kit.sh)"; return 1; }
  MEGATRAIN_KIT=$(cd "$kit" && pwd)
  export MEGATRAIN_KIT PATH=$MEGATRAIN_KIT/bin:$PATH
}

# open_build DIR: a build folder (the machine can build: bash scripts/setup.sh) laid out as a kit in
# the scratch folder, so every stage runs the same way on it.
open_build() {
  local build kit=$scratch/kit t f
  build=$(cd "$1" && pwd) || return 1
  mkdir -p "$kit/libexec" "$kit/data"
  for t in "${kit_targets[@]}"; do
    f=$(find "$build" -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "no $t in $build (a build with the CUDA backend: MEGATRAIN_CUDA=ON)"; return 1; }
    ln -s "$f" "$kit/libexec/$t"
  done
  for f in science wisdom; do ln -s "${MEGATRAIN_FORTUNES:-/usr/share/games/fortunes}/$f" "$kit/data/$f"; done
  cp scripts/gpu_kit/env.sh "$kit/env.sh"
  kit_write_wrappers "$kit"
  echo "build folder $build at commit $(git rev-parse --short HEAD) (not a kit)" >"$kit/MANIFEST"
  open_kit "$kit"
}
