# A just-bootstrapped Debian 12 (bookworm) root, for the checks that must not see this machine's
# packages (sourced by scripts/check_fresh_setup.sh and scripts/gpu_kit/check_kit.sh). The minbase
# root is bootstrapped once with debootstrap and cached as a tarball (FRESH_ROOT_CACHE, default
# /var/cache/megatrain/bookworm-minbase.tar); each check unpacks it anew. Needs root.

fresh_root_cache=${FRESH_ROOT_CACHE:-/var/cache/megatrain/bookworm-minbase.tar}
fresh_root_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# fresh_root_make ROOT LOG: ROOT filled from the cache, or bootstrapped (output to LOG) and cached.
fresh_root_make() {
  local root=$1 log=$2
  mkdir -p "$root"
  if [ -f "$fresh_root_cache" ]; then
    tar -C "$root" -xf "$fresh_root_cache"
    return
  fi
  command -v debootstrap >/dev/null || { echo "debootstrap missing; run scripts/setup.sh" >"$log"; return 1; }
  debootstrap --variant=minbase bookworm "$root" "$fresh_root_mirror" >"$log" 2>&1 || return 1
  # The suites of a standard Debian 12 install, so package versions match a real machine.
  cat >"$root/etc/apt/sources.list" <<EOF
deb $fresh_root_mirror bookworm main
deb $fresh_root_mirror bookworm-updates main
deb ${fresh_root_mirror%/debian}/debian-security bookworm-security main
EOF
  mkdir -p "$(dirname "$fresh_root_cache")"
  tar -C "$root" -cf "$fresh_root_cache.tmp" . && mv "$fresh_root_cache.tmp" "$fresh_root_cache"
}

# fresh_root_copy_checkout ROOT DIR: the checkout's files as a clone would have them (plus
# uncommitted changes; build outputs are not copied) into ROOT/DIR.
fresh_root_copy_checkout() {
  mkdir -p "$1/$2"
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -C "$1/$2" -xf -
}

# fresh_root_mount ROOT: what a running system has: /proc, /sys, /dev, and /dev/shm for Open MPI.
fresh_root_mount() {
  mount -t proc proc "$1/proc"
  mount -t sysfs sys "$1/sys"
  mount --rbind /dev "$1/dev"
  mount --make-rslave "$1/dev"
  mount -t tmpfs tmpfs "$1/dev/shm"
}

# fresh_root_remove WORK ROOT: kills what still runs inside ROOT, unmounts everything under it
# (deepest first) and removes WORK only when nothing is mounted there any more: removing it with
# /dev still bound inside would delete the host's /dev.
fresh_root_remove() {
  local work=$1 root=$2 m p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$root"* ]] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  sleep 1
  for m in $(findmnt -rn -o TARGET | grep -F "$root" | sort -r); do umount -l "$m" 2>/dev/null; done
  if findmnt -rn -o TARGET | grep -qF "$root"; then
    echo "could not unmount everything under $root; left it in place" >&2
  else
    rm -rf "$work"
  fi
}
