#!/usr/bin/env bash
# Installs everything dlrr needs on Debian 12 (idempotent: a second run changes nothing).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config clang-14 llvm-14 libclang-rt-14-dev clang-format
      capnproto libcapnp-dev libzstd-dev libxxhash-dev libunwind-dev libgtest-dev
      python3 python3-dev python3-torch python3-numpy python3-torchvision python3-skorch libopenblas0 gdb procps util-linux
      clang-tidy-19 python3-pyflakes zstd chromium python3-pil python3-debugpy
      iproute2)  # test_dist_nodes: two machines as network namespaces
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# clang-tidy-22 (Debian's, from bookworm-security) when the sources carry it: it no longer
# matches inside system headers, ~2.4x less CPU than clang-tidy-19 here. scripts/tidy.sh takes
# the newest present; 19 (bookworm main, above) is the fallback.
if ! command -v clang-tidy-22 >/dev/null && apt-cache show clang-tidy-22 >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-tidy-22 >/dev/null ||
    echo "setup: clang-tidy-22 not installed; scripts/tidy.sh uses clang-tidy-19"
fi
echo "setup: all packages present"
