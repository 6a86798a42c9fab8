// CUDA device discovery. A machine without a GPU or driver is not an error here: the
// grid then runs on the CPU backend. Errors name file and line via FLEXSP_CUDA_CHECK.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace flexsp {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void cuda_set_device(int device) { FLEXSP_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace flexsp
