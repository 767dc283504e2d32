#!/usr/bin/env bash
# Installs every Debian package tensord needs to build and test. Idempotent, non-interactive,
# must run as root (or with sudo available). Runs `apt-get update` only when a package is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libprotobuf-dev protobuf-compiler libonnx-dev
  libgrpc++-dev protobuf-compiler-grpc libdnnl-dev
  # tests
  libgtest-dev libgmock-dev python3 python3-numpy python3-torch python3-torchvision python3-onnx
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
