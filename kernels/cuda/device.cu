// CUDA device discovery. A machine without a GPU or driver is not an error here: the
// grid then runs on the CPU backend. Errors name file and line via FLEXSP_CUDA_CHECK.
#include <cstring>

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

void cuda_device_uuid(int device, uint8_t out[16]) {
  cudaDeviceProp prop{};
  FLEXSP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  static_assert(sizeof(prop.uuid.bytes) == 16, "CUDA device UUIDs are 16 bytes");
  std::memcpy(out, prop.uuid.bytes, 16);
}

}  // namespace flexsp
