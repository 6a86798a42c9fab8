#!/usr/bin/env bash
# Builds flexsp with CUDA (sm_90) HERE, against the Debian packages that fetch_debs.sh
# unpacked into .deps/root, and packs what the GPU tests run (executables, CTest files,
# GoogleTest's test lists; no objects or static libraries) into .deps/build-gpu.tar.xz.
# The device's minutes then go to tests, not to compiling: run_gpu_suite.sh --prebuilt
# unpacks it into build-gpu and links this checkout's path to the device's copy, so the
# absolute paths CMake wrote (the binaries, the source dir, the carried mpirun) resolve.
# The build links the CUDA toolkit's libraries (cudart, cuBLAS, NCCL, cuDNN, NVRTC) by
# soname; the device finds them in its toolkit or its PyTorch's nvidia-* wheels
# (run_gpu_suite.sh). cuDNN's attention is built in when the frontend's headers can be
# fetched (fetch_cudnn_frontend.sh, from PyPI); without them the build says so and keeps
# flexsp's own attention kernels.
#   bash scripts/gpu/fetch_debs.sh && bash scripts/gpu/pack_build.sh
#   device run, carry [".deps/root.tar.xz", ".deps/build-gpu.tar.xz", ".deps/wikipedia_lengths.txt"]:
#     bash scripts/gpu/run_gpu_suite.sh --prebuilt
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$repo/build-gpu
[ -d "$repo/.deps/root/usr" ] || { echo "no .deps/root: run scripts/gpu/fetch_debs.sh first" >&2; exit 1; }
# shellcheck source=deps_env.sh
source "$repo/scripts/gpu/deps_env.sh" "$repo/.deps/root"
bash "$repo/scripts/gpu/fetch_cudnn_frontend.sh" ||
  echo "pack_build: no cuDNN frontend headers: this build keeps flexsp's own attention" >&2
launcher=()
command -v ccache >/dev/null &&
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFLEXSP_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${FLEXSP_DEPS_CMAKE_ARGS[@]}" "${launcher[@]}" >/dev/null
grep -q 'CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" || { echo "not a CUDA build" >&2; exit 1; }
targets=(flexsp flexsp_gpu_tests bench_gpu test_gpu_mpi_staged test_gpu_mpi_ring test_gpu_mpi_ring_chunks)
grep -q 'test_gpu_mpi_nccl' "$build/tests/CTestTestfile.cmake" && targets+=(test_gpu_mpi_nccl)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

# What travels: every regular file but objects, static libraries and CMake's scratch.
(cd "$build" && find . -type f ! -name '*.o' ! -name '*.a' ! -name '*.d' ! -path '*/CMakeFiles/*' \
   ! -name 'CMakeCache.txt' ! -name '*.make' ! -name 'Makefile' -print) |
  sort >"$repo/.deps/build-gpu.files"
echo "$repo" >"$build/.source_path"
echo ./.source_path >>"$repo/.deps/build-gpu.files"
# The commit the build is of (the device's copy has no .git): results files name it.
echo "$(git -C "$repo" rev-parse HEAD)$([ -n "$(git -C "$repo" status --short -uno)" ] && echo +changes)" >"$build/.commit"
echo ./.commit >>"$repo/.deps/build-gpu.files"
tar -C "$build" -cf - -T "$repo/.deps/build-gpu.files" | xz -T0 -6 >"$repo/.deps/build-gpu.tar.xz"
echo "build-gpu.tar.xz: $(du -sh "$repo/.deps/build-gpu.tar.xz" | cut -f1) ($(wc -l <"$repo/.deps/build-gpu.files") files), built at $(git -C "$repo" rev-parse --short HEAD)"
