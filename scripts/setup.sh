#!/usr/bin/env bash
# Installs the Debian packages flexsp needs, and nothing when they are all present.
#   scripts/setup.sh            build and run dependencies (the demo)
#   scripts/setup.sh --tests    plus what the test suite uses (PyTorch, h5py, numpy,
#                               python3-venv for the transformers comparison, and Slurm
#                               with munge and iproute2 for the jobscript and cluster tests)
# Runs apt-get as root, or through sudo. Idempotent: a second run changes nothing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev libfmt-dev nlohmann-json3-dev
  coinor-libcbc-dev libopenblas-dev
  libsentencepiece-dev sentencepiece
  libpcre2-dev libicu-dev libssl-dev
  libgtest-dev
  python3 python3-matplotlib
)
if [[ "${1:-}" == "--tests" ]]; then
  packages+=(python3 python3-torch python3-h5py python3-numpy python3-venv slurm-wlm munge iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} Debian packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
