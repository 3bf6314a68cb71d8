# Sourced by scripts/torch2.sh and scripts/fresh_clone.sh: the Debian mirror this host uses and
# the mounts a test chroot needs, undone in reverse order on exit (failure included).
#   debian_mirror WHO VAR   the mirror in $VAR, else the first .../debian URI of this host's apt
#                           sources (one-line "deb URI suite ..." and deb822 "URIs: URI" forms)
#   chroot_bind ROOT SRC DST, chroot_mount_all ROOT, chroot_cleanup (the EXIT trap)

debian_mirror() {
  local who=$1 var=$2 uri
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -nE 's/^deb(\s+\[[^]]*\])?\s+(\S+).*/\2/p; s/^URIs:\s*(.*)/\1/p' | tr ' ' '\n' |
        grep -E '^https?://.*/debian/?$' | head -n1 || true)
  [ -n "$uri" ] || { echo "$who: no Debian mirror in /etc/apt/sources*; set $var" >&2; exit 2; }
  echo "$uri"
}

CHROOT_MOUNTS=()
chroot_cleanup() {
  local i
  for ((i = ${#CHROOT_MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${CHROOT_MOUNTS[i]}" 2>/dev/null || umount -l "${CHROOT_MOUNTS[i]}" 2>/dev/null || true
  done
  CHROOT_MOUNTS=()
}
trap chroot_cleanup EXIT
trap 'exit 130' INT TERM

chroot_bind() {  # chroot_bind ROOT SRC DST-inside-ROOT
  mkdir -p "$1$3"
  mount --bind "$2" "$1$3"
  CHROOT_MOUNTS+=("$1$3")
}

chroot_mount_all() {  # chroot_mount_all ROOT
  mkdir -p "$1/proc"
  mount -t proc proc "$1/proc"
  CHROOT_MOUNTS+=("$1/proc")
  chroot_bind "$1" /sys /sys
  chroot_bind "$1" /dev /dev
  chroot_bind "$1" /dev/pts /dev/pts
  chroot_bind "$1" /dev/shm /dev/shm  # DataLoader workers share tensors through it
  cp /etc/resolv.conf "$1/etc/resolv.conf" 2>/dev/null || true
}
