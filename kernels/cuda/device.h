// CUDA device discovery for the process grid. Built only with FLEXSP_HAVE_CUDA.
#pragma once

#include <cstdint>

namespace flexsp {

// Number of visible CUDA devices; 0 when there is no driver or no device (no throw).
int cuda_device_count();
// Makes `device` current for this rank; throws Error on failure.
void cuda_set_device(int device);
// The device's 16-byte UUID (the same for every process that sees that GPU, whatever
// CUDA_VISIBLE_DEVICES numbers it): tells whether ranks share a GPU.
void cuda_device_uuid(int device, uint8_t out[16]);

}  // namespace flexsp
