#!/usr/bin/env bash
# A newcomer's first minutes, checked: a fresh Debian 12 (bookworm) system, a git clone of this
# checkout's HEAD, the README's first command run exactly as the README writes it; then the four
# tools must be on root's default PATH and the demo must have replayed to its NaN.
#   DLRR_BOOKWORM_DIR     the cached base system (default /var/cache/dlrr/bookworm): debootstrap
#                         --variant=minbase plus ccache (see below); reused while complete
#   DLRR_BOOKWORM_MIRROR  the Debian mirror (default: the first .../debian URI in this host's apt sources)
# Every run starts from a copy of the base ($DIR.run: removed after a pass, kept after a failure
# until the next run), so scripts/setup.sh really installs its packages. What is cached between runs only saves downloads and compiling:
# the .deb files apt fetched ($DIR.debs, bound to the copy's /var/cache/apt/archives) and
# ccache's results ($DIR.ccache: ccache is in the base so that scripts/install.sh uses it; the
# objects are the ones g++ would make). Everything mounted is unmounted on exit, failure included.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DLRR_BOOKWORM_DIR:-/var/cache/dlrr/bookworm}
RUN=$DIR.run
BASE_MARK=$DIR/.dlrr-base-done  # debootstrap and ccache finished
[ "$(id -u)" = 0 ] || { echo "fresh_clone: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

. "$REPO/scripts/chroot_lib.sh"
mirror() { debian_mirror fresh_clone DLRR_BOOKWORM_MIRROR; }
bind() { chroot_bind "$@"; }          # bind ROOT SRC DST-inside-ROOT
mount_all() { chroot_mount_all "$1"; }  # mount_all ROOT
cleanup() { chroot_cleanup; }
# Root's login environment on Debian: its default PATH (/etc/profile's and login.defs' for uid
# 0), so "on PATH" means what it means to a user who just logged in.
ROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
in_chroot() {  # in_chroot ROOT CMD...
  local root=$1
  shift
  chroot "$root" env -i HOME=/root PATH=$ROOT_PATH LANG=C.UTF-8 TERM=dumb "$@"
}
now() { date +%s; }

case "$DIR" in /?*/?*) ;; *) echo "fresh_clone: DLRR_BOOKWORM_DIR must be an absolute path below a directory: $DIR" >&2; exit 2 ;; esac
mkdir -p "$(dirname "$DIR")" "$DIR.debs" "$DIR.ccache"
exec 9>"$DIR.lock"
flock 9  # one run at a time: a second would share (and unmount) the mounts
# Mounts left by a run killed with SIGKILL: nothing else can hold them while we have the lock.
grep -E " ($DIR|$RUN)/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l || true
t0=$(now)
if [ ! -f "$BASE_MARK" ]; then
  rm -rf "$DIR"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  m=$(mirror)
  echo "fresh_clone: debootstrap bookworm from $m into $DIR"
  debootstrap --variant=minbase bookworm "$DIR" "$m" >"$DIR.debootstrap.log" 2>&1 ||
    { tail -n 20 "$DIR.debootstrap.log" >&2; exit 1; }
  mount_all "$DIR"
  in_chroot "$DIR" apt-get update -qq
  in_chroot "$DIR" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ccache >/dev/null
  in_chroot "$DIR" apt-get clean
  rm -rf "$DIR/var/lib/apt/lists/"*  # a fresh machine has not run apt-get update yet
  cleanup
  touch "$BASE_MARK"
  echo "fresh_clone: base system made in $(($(now) - t0)) s"
fi

# Removes the run's copy, never through a mount: with /dev or /sys still bound inside, rm would
# reach the host's own.
remove_run() {
  cleanup
  if grep -qF " $RUN/" /proc/mounts; then
    echo "fresh_clone: $RUN still has mounts; not removing it" >&2
    exit 1
  fi
  rm -rf --one-file-system "$RUN"
}
t1=$(now)
remove_run
cp -a "$DIR" "$RUN"
rm -f "$RUN/.dlrr-base-done"
mount_all "$RUN"
bind "$RUN" "$DIR.debs" /var/cache/apt/archives
bind "$RUN" "$DIR.ccache" /root/.ccache
# The clone: what `git clone URL` gives a newcomer, at this checkout's HEAD (commit first).
head=$(git -C "$REPO" rev-parse HEAD)
git clone -q --no-hardlinks "$REPO" "$RUN/root/dlrr"
git -C "$RUN/root/dlrr" checkout -q --detach "$head"
# The README's first command, exactly as written: the first line of its first code block.
cmd=$(awk '/^```/ { if (inside) exit; inside = 1; next } inside && NF { print; exit }' "$RUN/root/dlrr/README.md")
[ -n "$cmd" ] || { echo "fresh_clone: no command in the README's first code block" >&2; exit 1; }
echo "fresh_clone: in a fresh bookworm, clone of $head: $cmd"
log=$DIR.run.log
if ! in_chroot "$RUN" bash -c "cd /root/dlrr && $cmd" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "fresh_clone: FAILED: '$cmd' exited non-zero (whole output: $log)" >&2
  exit 1
fi
t2=$(now)
fail=0
for t in dlrecord dlreplay dltrace dlpreflight; do
  where=$(in_chroot "$RUN" bash -lc "command -v $t" || true)
  if [ -z "$where" ]; then echo "fresh_clone: FAILED: $t is not on root's PATH after '$cmd'" >&2; fail=1; fi
done
# The demo's end: the replay stopped at the recorded NaN (dlreplay's verdict line).
if ! grep -Eq "^dlreplay: reached nan; [0-9]+ of [0-9]+ recorded steps verified bit-exact" "$log"; then
  tail -n 40 "$log" >&2
  echo "fresh_clone: FAILED: the demo did not replay to its NaN (whole output: $log)" >&2
  fail=1
fi
# The demo's order (issue 32): the job's last lines, then dlrecord's summary, then dltrace info.
summary=$(grep -B1 -m1 '^== what happened' "$log" | head -n1)
case "$summary" in
  "dlrecord: trace "*) ;;
  *) echo "fresh_clone: FAILED: the recording's last line is not dlrecord's summary: $summary" >&2; fail=1 ;;
esac
[ $fail = 0 ] || exit 1  # the copy is kept for a look (the next run replaces it)
remove_run  # passed: 3.7 GiB not worth keeping
echo "fresh_clone: passed: the tools are on PATH and the demo replayed to its NaN" \
     "(base $((t1 - t0)) s, '$cmd' $((t2 - t1)) s; output in $log)"
