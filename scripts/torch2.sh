#!/usr/bin/env bash
# Second platform: builds dlrr and runs its unit, Python-hook and integration tests on Debian 13
# (trixie: torch 2.6, numpy 2.2, Python 3.13, g++ 14) inside a cached chroot.
#   DLRR_TRIXIE_DIR     the chroot (default /var/cache/dlrr/trixie); reused while complete
#   DLRR_TRIXIE_MIRROR  the Debian mirror (default: the first .../debian URI in this host's apt sources)
#   DLRR_TRIXIE_CTEST   extra ctest arguments (e.g. "-R integration_test_replay")
#   DLRR_TRIXIE_TARGETS build only these targets (e.g. "dlrr dlrecord dlreplay dltrace dlrr_python_hook"
#                       for the integration tests: the unit tests are the slowest to build)
# With arguments, runs them (a shell command line, in the checkout) instead of ctest, e.g.
#   scripts/torch2.sh 'cd tests/integration && DLRR_BUILD=$PWD/../../build-trixie python3 -m unittest -v test_x'
# A chroot from an interrupted run is detected by its missing marker files (written last) and
# redone. Everything mounted is unmounted on exit, failure included.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DLRR_TRIXIE_DIR:-/var/cache/dlrr/trixie}
PKGS=(g++ cmake ninja-build pkg-config ccache capnproto libcapnp-dev libzstd-dev libxxhash-dev
      libunwind-dev libgtest-dev gdb procps util-linux libopenblas0
      python3 python3-torch python3-numpy python3-torchvision python3-setuptools libtorch-dev  # inductor: setuptools, Python.h, ATen headers
      python3-debugpy zstd)  # test_debugpy; test_secrets decompresses the trace with zstd(1)
BASE_MARK=$DIR/.dlrr-base-done    # debootstrap finished
PKGS_MARK=$DIR/.dlrr-packages     # holds the package list last installed completely
[ "$(id -u)" = 0 ] || { echo "torch2: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

. "$REPO/scripts/chroot_lib.sh"
mirror() { debian_mirror torch2 DLRR_TRIXIE_MIRROR; }
bind() { chroot_bind "$DIR" "$@"; }  # bind SRC DST-inside-chroot
mount_all() { chroot_mount_all "$DIR"; }
# DLRR_TEST_CHROOT: the tests know they run here. The chroot's / is no mount point, so dlreplay's
# kernel sandbox cannot be made inside (it falls back to the libc layer and says so:
# test_isolation skips, test_preflight checks the libc layer's redirect), and it has no chromium
# (test_report renders its pages on the main platform only).
in_chroot() {
  chroot "$DIR" env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DLRR_TEST_CHROOT=trixie "$@"
}

case "$DIR" in /?*/?*) ;; *) echo "torch2: DLRR_TRIXIE_DIR must be an absolute path below a directory: $DIR" >&2; exit 2 ;; esac
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9  # one run per chroot: a second one would share (and unmount) its mounts
# Mounts left by a run killed with SIGKILL: nothing else can hold them while we have the lock.
grep -F " $DIR/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l || true
if [ ! -f "$BASE_MARK" ]; then
  rm -rf "$DIR"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  m=$(mirror)
  echo "torch2: debootstrap trixie from $m into $DIR"
  debootstrap --variant=minbase trixie "$DIR" "$m" >"$DIR.debootstrap.log" 2>&1 ||
    { tail -n 20 "$DIR.debootstrap.log" >&2; exit 1; }
  touch "$BASE_MARK"
fi
mount_all
if [ "$(cat "$PKGS_MARK" 2>/dev/null)" != "${PKGS[*]}" ]; then
  echo "torch2: installing ${PKGS[*]}"
  rm -f "$PKGS_MARK"
  in_chroot dpkg --configure -a
  in_chroot apt-get update -qq
  in_chroot env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
  in_chroot apt-get clean
  echo "${PKGS[*]}" >"$PKGS_MARK"
fi
echo "torch2: $(in_chroot /usr/bin/python3 -c 'import sys, torch, numpy; print("Python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__)'), $(in_chroot g++ --version | head -n1)"

# The checkout at the same path inside, so build-trixie's absolute paths hold on both sides.
bind "$REPO" "$REPO"
in_chroot bash -c "cd '$REPO' && export CCACHE_BASEDIR='$REPO' CCACHE_NOHASHDIR=1 CCACHE_DIR=/root/.ccache &&  # worktrees share hits
  cmake -S . -B build-trixie -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRR_WERROR=ON \
        -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null &&
  cmake --build build-trixie -j\$(nproc) ${DLRR_TRIXIE_TARGETS:+--target $DLRR_TRIXIE_TARGETS}"
if [ $# -gt 0 ]; then
  in_chroot bash -c "cd '$REPO' && $*"
  exit
fi
in_chroot bash -c "cd '$REPO' && ctest --test-dir build-trixie --output-on-failure -j2 --timeout 900 ${DLRR_TRIXIE_CTEST:-}"
echo "torch2: all tests passed on trixie"
