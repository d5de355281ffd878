#!/usr/bin/env bash
# Runs README's two commands (set up + demo; set up + tests) in a just-bootstrapped Debian 12
# (bookworm) root, so a package that only this machine has cannot hide a broken set-up.
#   sudo bash scripts/check_fresh_setup.sh            both commands
#   sudo bash scripts/check_fresh_setup.sh --first    only the first (set up + demo)
# Needs root, debootstrap and Debian's package mirror. The bootstrapped base root is cached as a
# tarball (FRESH_ROOT_CACHE, default /var/cache/megatrain/bookworm-minbase.tar) and unpacked anew
# for every run; the working copy is made from the checkout's files that git tracks or does not
# ignore (so uncommitted changes are tested, build outputs are not). Prints each step's time and
# PASS or FAIL; on failure, the step's last lines and any CMake error. Each step's full output stays
# in a /var/tmp/megatrain-fresh-logs.* folder, named at the end. Exit 0 only on PASS.
set -uo pipefail
cd "$(dirname "$0")/.."
only_first=0
case "${1:-}" in
  --first) only_first=1 ;;
  "") ;;
  *) echo "usage: $0 [--first]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "check_fresh_setup: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "check_fresh_setup: debootstrap missing; run scripts/setup.sh" >&2; exit 2; }

# shellcheck source=scripts/fresh_root.sh
. scripts/fresh_root.sh
work=$(mktemp -d /var/tmp/megatrain-fresh.XXXXXX)
root=$work/root
logs=$(mktemp -d /var/tmp/megatrain-fresh-logs.XXXXXX)  # kept: each step's full output
trap 'fresh_root_remove "$work" "$root"' EXIT
trap 'exit 130' INT TERM

step_start=0
step() { step_start=$(date +%s); printf '== %s\n' "$1"; }
step_ok() { printf '   done in %ds\n' "$(($(date +%s) - step_start))"; }
# FAIL with the step's log tail and the CMake error, if there is one.
step_fail() {
  local name=$1 log=$2
  printf '   FAILED after %ds\n--- last lines of %s ---\n' "$(($(date +%s) - step_start))" "$name"
  tail -n 40 "$log"
  if grep -q 'CMake Error' "$log"; then
    echo "--- CMake error ---"
    grep -A6 'CMake Error' "$log" | head -n 20
  fi
  echo "FAIL: $name (logs in $logs)"
  exit 1
}

# 1. A clean bookworm root: from the cache, or bootstrapped and cached.
step "bookworm root (cache: $fresh_root_cache)"
fresh_root_make "$root" "$logs/debootstrap.log" || step_fail "bootstrap" "$logs/debootstrap.log"
step_ok

# 2. The checkout's files, as a clone would have them (plus uncommitted changes).
step "copy the checkout into /root/megatrain"
fresh_root_copy_checkout "$root" root/megatrain || step_fail "copy" /dev/null
step_ok

# 3. What a running Debian system has: /proc, /sys, /dev (with shared memory for Open MPI), and
# this network's settings, as every machine on it has them: DNS, the local CA certificates a proxy
# may need (Debian's ca-certificates merges them when setup.sh's packages pull it in) and pip's
# config. None of these is a package.
fresh_root_mount "$root"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -rL /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp -L /etc/pip.conf "$root/etc/pip.conf"

# 4. README's commands, word for word: the lines of its sh blocks that start with bash scripts/setup.sh.
mapfile -t commands < <(awk '/^```sh$/{on=1; next} /^```$/{on=0} on && /^bash scripts\/setup\.sh/' README.md)
[ ${#commands[@]} = 2 ] || { echo "FAIL: README should have exactly two set-up commands, found ${#commands[@]}"; exit 1; }
[ $only_first = 1 ] && commands=("${commands[0]}")
total_start=$(date +%s)
for i in "${!commands[@]}"; do
  cmd=${commands[$i]}
  step "README command $((i + 1)): $cmd"
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/megatrain && $cmd" >"$logs/command$((i + 1)).log" 2>&1 ||
    step_fail "README command $((i + 1))" "$logs/command$((i + 1)).log"
  tail -n 3 "$logs/command$((i + 1)).log" | sed 's/^/   | /'
  step_ok
done
echo "PASS: README's commands ran in a fresh Debian 12 root ($(($(date +%s) - total_start))s after bootstrap; logs in $logs)"
