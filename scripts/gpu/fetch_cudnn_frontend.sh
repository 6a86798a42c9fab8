#!/usr/bin/env bash
# Unpacks the cuDNN frontend's C++ headers (header-only; NVIDIA's graph API over libcudnn,
# which ships with the CUDA toolkit) from PyPI's nvidia-cudnn-frontend wheel into
# .deps/cudnn-frontend/include, where CMake's FLEXSP_CUDNN looks (or CUDNN_FRONTEND_ROOT).
# An optional build dependency of GPU builds only: with it, kernels/cuda/attention_cudnn.cpp
# runs cuDNN's fused attention; without it the CUDA backend keeps its own kernels.
#   bash scripts/gpu/fetch_cudnn_frontend.sh [VERSION]   (default below)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
version=${1:-1.32.0}
dest=${FLEXSP_DEPS_DIR:-$repo/.deps}/cudnn-frontend
if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "cudnn-frontend $version: $dest (already there)"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
  "nvidia-cudnn-frontend==$version"
rm -rf "$dest" && mkdir -p "$dest"
python3 - "$tmp"/nvidia_cudnn_frontend-*.whl "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n.endswith("cudnn_frontend.h") for n in names):
        sys.exit(f"{wheel}: no include/cudnn_frontend.h")
    z.extractall(dest, names)
PY
echo "$version" >"$dest/VERSION"
echo "cudnn-frontend $version: $dest/include ($(find "$dest/include" -name '*.h*' | wc -l) headers)"
