// Which GPU each rank drives. The process grid (lib/grid) knows ranks and nodes only;
// binding a rank to a device is the platform's, the one layer that knows kernels/cuda:
// rank r of its node takes visible device (r mod the visible count), so ranks beyond the
// GPUs of a node share them (MPI-staged communication handles that; NCCL refuses it).
#pragma once

#include "lib/grid/grid.h"

namespace flexsp {

// Sets g.gpus_visible and g.device and makes the device current; a build without CUDA
// or a machine without a GPU leaves the grid on the CPU (device -1).
void grid_bind_device(Grid& g);

}  // namespace flexsp
