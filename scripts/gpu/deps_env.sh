# Sourced (bash): points the build and the runtime at the Debian packages unpacked by
# fetch_debs.sh into ROOT (default: <repo>/.deps/root). Sets PATH, LD_LIBRARY_PATH,
# OPAL_PREFIX (Open MPI relocated), PMIX_MCA_* (its plugins), PKG_CONFIG_PATH +
# PKG_CONFIG_SYSROOT_DIR (the .pc files say prefix=/usr), CMAKE_PREFIX_PATH, and
# FLEXSP_DEPS_CMAKE_ARGS (an array of -D options for `cmake -S . -B build ...`: the root
# as CMAKE_FIND_ROOT_PATH, the MPI wrappers).
#   source scripts/gpu/deps_env.sh [ROOT]
_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FLEXSP_DEPS_ROOT=$(cd "${1:-$_here/../../.deps/root}" && pwd)
_lib=$FLEXSP_DEPS_ROOT/usr/lib/x86_64-linux-gnu
export FLEXSP_DEPS_ROOT
export PATH=$FLEXSP_DEPS_ROOT/usr/bin:$PATH
export LD_LIBRARY_PATH=$_lib:$_lib/openblas-pthread:$_lib/openmpi/lib:$_lib/hdf5/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$FLEXSP_DEPS_ROOT/usr
# PMIx looks for its plugins under the path it was built with, where a machine with its
# own PMIx (the device's Ubuntu) has other versions of them: point it at ours.
export PMIX_MCA_mca_base_component_path=$_lib/pmix2/lib/pmix
export PMIX_MCA_pcompress_base_silence_warning=1
export HDF5_USE_SHLIB=yes  # h5pcc: link the shared HDF5 (the static one is pruned)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PKG_CONFIG_PATH=$_lib/pkgconfig:$FLEXSP_DEPS_ROOT/usr/share/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export PKG_CONFIG_SYSROOT_DIR=$FLEXSP_DEPS_ROOT
export CMAKE_PREFIX_PATH=$FLEXSP_DEPS_ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
FLEXSP_DEPS_CMAKE_ARGS=(
  -DCMAKE_FIND_ROOT_PATH="$FLEXSP_DEPS_ROOT"
  -DMPI_C_COMPILER="$FLEXSP_DEPS_ROOT/usr/bin/mpicc.openmpi"
  -DMPI_CXX_COMPILER="$FLEXSP_DEPS_ROOT/usr/bin/mpicxx.openmpi"
  -DMPIEXEC_EXECUTABLE="$FLEXSP_DEPS_ROOT/usr/bin/mpirun.openmpi"
  -DPKG_CONFIG_EXECUTABLE="$FLEXSP_DEPS_ROOT/usr/bin/pkgconf"
  -DHDF5_C_COMPILER_EXECUTABLE="$FLEXSP_DEPS_ROOT/usr/bin/h5pcc.openmpi"
  -DHDF5_ROOT="$FLEXSP_DEPS_ROOT/usr"
)
unset _here _lib
