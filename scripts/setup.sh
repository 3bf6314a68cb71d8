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
echo "setup: all packages present"
