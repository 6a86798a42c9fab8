#include "lib/platform/device_binding.h"

#ifdef FLEXSP_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace flexsp {

void grid_bind_device(Grid& g) {
#ifdef FLEXSP_HAVE_CUDA
  g.gpus_visible = cuda_device_count();
  if (g.gpus_visible > 0) {
    g.device = g.real_local_rank % g.gpus_visible;
    cuda_set_device(g.device);
  }
#else
  (void)g;
#endif
}

}  // namespace flexsp
