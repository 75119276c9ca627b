#!/usr/bin/env bash
# Installs the Debian packages homodyne-cpp needs to build, test and plot. Idempotent.
# Runs apt-get as root, or through sudo when not root. Nothing is downloaded at build time.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libeigen3-dev libceres-dev libhdf5-dev hdf5-tools libyaml-cpp-dev liblzf-dev zlib1g-dev
  libpagmo-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libspdlog-dev
  libopenmpi-dev openmpi-bin
  python3-matplotlib python3-h5py python3-numpy python3-scipy python3-iminuit time
  python3-dev pybind11-dev python3-pybind11 python3-pytest clang-format
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-dependencies: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
echo "install-dependencies: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
