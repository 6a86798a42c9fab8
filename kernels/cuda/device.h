// CUDA device discovery for the process grid. Built only with FLEXSP_HAVE_CUDA.
#pragma once

namespace flexsp {

// Number of visible CUDA devices; 0 when there is no driver or no device (no throw).
int cuda_device_count();
// Makes `device` current for this rank; throws Error on failure.
void cuda_set_device(int device);

}  // namespace flexsp
