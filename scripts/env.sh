# Sourced by the scripts: lets Open MPI run as root (containers, CI), oversubscribe the
# cores of a small machine, and keeps OpenMP threads from spinning.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# OpenMP kernels and OpenBLAS keep separate thread pools: idle OpenMP threads must sleep,
# not spin, or they steal the cores BLAS runs on.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
