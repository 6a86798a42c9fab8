#!/usr/bin/env bash
# Prepares the build and runtime dependencies of flexsp for a bare GPU machine (CUDA driver
# and toolkit, CMake, a C++ compiler; no MPI, HDF5, Boost, fmt, and no package registry):
# downloads the Debian packages below with `apt-get download` into .deps/debs/, unpacks
# them with `dpkg -x` into .deps/root/ and prunes what a build does not read (docs, man
# pages, static libraries other than GoogleTest's, Boost headers that program_options does
# not include). Run here (a Debian 12 machine with apt); .deps/ is git-ignored and travels
# to the device machine as .deps/root.tar.xz (below); scripts/gpu/run_gpu_suite.sh uses it.
#
# The list is the dev packages of CMakeLists.txt plus their shared-library closure
# (resolved once with ldd + dpkg -S), minus the libraries every
# Linux with a C++ compiler has (libc6, libgcc-s1, libstdc++6, zlib1g). HDF5's Fortran and
# C++ libraries are left out (flexsp uses HDF5's C API only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
deps=${FLEXSP_DEPS_DIR:-$repo/.deps}
debs=$deps/debs
root=$deps/root

packages=(
  # MPI (Open MPI 4.1) with its wrappers and runtime
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libpmix2 libfabric1 libucx0
  libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200
  libnl-route-3-200 libnuma1 libmunge2 libudev1 libatomic1
  # parallel HDF5 (C) and what it links (szip/aec, curl and its TLS/kerberos chain)
  libhdf5-openmpi-dev libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libsz2 libaec0 libcurl4 libnghttp2-14
  libidn2-0 librtmp1 libssh2-1 libpsl5 libssl3 libgssapi-krb5-2 libldap-2.5-0 libzstd1
  libbrotli1 libunistring2 libgnutls30 libhogweed6 libnettle8 libgmp10 libkrb5-3
  libk5crypto3 libcom-err2 libkrb5support0 libsasl2-2 libp11-kit0 libtasn1-6 libkeyutils1
  libffi8 libbz2-1.0 libuuid1
  # Boost.Program_options, fmt, nlohmann-json
  libboost-program-options-dev libboost-program-options1.74-dev
  libboost-program-options1.74.0 libboost1.74-dev libfmt-dev libfmt9 nlohmann-json3-dev
  # OpenBLAS (pthread flavour) and its Fortran runtime
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0
  # SentencePiece, the COIN-OR MILP solver (Cbc/Clp/Cgl/Osi/CoinUtils)
  libsentencepiece-dev libsentencepiece0
  coinor-libcbc-dev coinor-libcbc3 coinor-libcgl-dev coinor-libcgl1 coinor-libclp-dev
  coinor-libclp1 coinor-libcoinutils-dev coinor-libcoinutils3v5 coinor-libosi-dev
  coinor-libosi1v5
  # Hugging Face tokenizers: PCRE2, ICU (NFC), libcrypto (SHA-256)
  libpcre2-dev libpcre2-8-0 libicu-dev libicu72 libssl-dev
  # GoogleTest, pkg-config
  libgtest-dev googletest pkgconf pkgconf-bin libpkgconf3
)

mkdir -p "$debs"
# apt-get download runs as _apt where it can: let it write here.
chmod 777 "$debs" 2>/dev/null || true
(cd "$debs" && apt-get download "${packages[@]}" >/dev/null)
rm -rf "$root"
mkdir -p "$root"
for f in "$debs"/*.deb; do dpkg -x "$f" "$root"; done

# Prune: documentation, static libraries (GoogleTest's are the only ones flexsp links).
rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bug} "$root"/usr/src \
  "$root"/usr/lib/x86_64-linux-gnu/fortran
find "$root" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
# Boost: keep only the headers that flexsp's Boost includes pull in, and the CMake configs.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -rhoE '#include <boost/[^>]+>' "$repo"/{app,lib,io,tools,tests} 2>/dev/null | sort -u >"$tmp/b.cpp" || true
echo '#include <boost/program_options.hpp>' >>"$tmp/b.cpp"
g++ -std=c++20 -M -isystem "$root/usr/include" "$tmp/b.cpp" | tr ' \\' '\n\n' | grep "^$root/usr/include/boost/" | sort -u >"$tmp/keep"
find "$root/usr/include/boost" -type f | sort | comm -23 - "$tmp/keep" | xargs -r rm -f
find "$root/usr/include/boost" -type d -empty -delete
echo "kept $(wc -l <"$tmp/keep") Boost headers"

# dpkg -x does not run update-alternatives: make the links flexsp's build looks for.
lib=$root/usr/lib/x86_64-linux-gnu
ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
ln -sf openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
ln -sf openblas-pthread/liblapack.so.3 "$lib/liblapack.so.3"
ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$lib/pkgconfig/openblas.pc"
# Debian's h5pcc has prefix=/usr baked in: make it relative to its own location.
sed -i 's|^prefix="/usr"$|prefix="$(cd "$(dirname "$0")/.." \&\& pwd)"|' "$root/usr/bin/h5pcc.openmpi"
ln -sf h5pcc.openmpi "$root/usr/bin/h5pcc"
# h5pcc links -lcrypto -lcurl -lsz -lz: the unversioned names live in -dev packages we skip.
for l in libcrypto.so.3 libcurl.so.4 libsz.so.2; do ln -sf "$l" "$lib/${l%.so.*}.so"; done
[ -e "$lib/libz.so" ] || ln -sf /lib/x86_64-linux-gnu/libz.so.1 "$lib/libz.so"
for t in mpicc mpicxx mpic++ mpirun mpiexec; do
  [ -e "$root/usr/bin/$t.openmpi" ] && ln -sf "$t.openmpi" "$root/usr/bin/$t"
done
[ -e "$root/usr/bin/orterun" ] && [ ! -e "$root/usr/bin/mpirun" ] && ln -sf orterun "$root/usr/bin/mpirun"
[ -e "$root/usr/bin/pkgconf" ] && ln -sf pkgconf "$root/usr/bin/pkg-config"

# The unpacked root is ~117 MiB (OpenBLAS alone is 37 MiB: every CPU kernel), over the
# device tool's 64 MiB carry limit; an xz tarball of it (~26 MiB) travels instead and
# run_gpu_suite.sh unpacks it there.
tar -C "$root" -cf - . | xz -T0 -6 >"$deps/root.tar.xz"
echo "root.tar.xz: $(du -sh "$deps/root.tar.xz" | cut -f1)"
echo "debs: $(ls "$debs" | wc -l) packages, $(du -sh "$debs" | cut -f1); root: $(du -sh "$root" | cut -f1)"

# The benchmarks draw batches from the Wikipedia lengths; ../shared does not reach the
# device, so a copy travels too: carry [".deps/root.tar.xz", ".deps/wikipedia_lengths.txt"].
lengths=$repo/../shared/data/wikipedia_lengths.txt
if [ -f "$lengths" ]; then
  cp "$lengths" "$deps/wikipedia_lengths.txt"
  echo "wikipedia_lengths.txt: $(du -sh "$deps/wikipedia_lengths.txt" | cut -f1)"
fi
