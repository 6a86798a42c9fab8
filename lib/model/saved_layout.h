// The saved-activation region of the model's workspace (llama.h, docs/offload.md): what
// the layers keep from their forward for their backward, carved into per-layer pointers.
//
// Design:
//  - A layout is one way of carving the region: `slots` slots for the layers' inputs
//    (layer l's in slot l % slots) and one for the head's input, and a LayerActs per slot
//    without activation checkpointing (one, rewritten by each layer's recompute, with
//    it), every piece sized for micro-batches of up to `tokens` tokens. A model without
//    offload has one layout, a slot per layer at its max tokens. With offload it has the
//    ring's (offload_ahead + 2 slots at max tokens) and, when some micro-batches keep
//    their blocks on the device (ModelConfig::offload_plain_tokens = P > 0), the plain
//    one (a slot per layer at P tokens).
//  - The region is sized once, at construction, as the larger of the model's layouts,
//    and each layout is carved from its start then: two precomputed pointer sets, of
//    which a micro-batch's forward picks one (its backward keeps it). Nothing is carved
//    or allocated per micro-batch, and layer 0's input (a pipeline stage's input) is the
//    region's first piece in either.
//  - A layout's activations (act_t) and its norms' fp32 statistics share the region, so
//    that the region is exactly the larger layout whatever the mix of the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/model_config.h"

namespace flexsp {

// Workspace pieces start at multiples of 64 elements (128 or 256 bytes), whatever the
// vocabulary or token count: vectorized kernels and cuDNN's attention (16 bytes) need it.
inline int64_t carve_size(int64_t n) { return (n + 63) / 64 * 64; }

// A layer's activations (llama.cpp's table of shapes; with token chunks the rows of
// everything but k and v are a chunk's).
struct LayerActs {
  act_t *ln1, *q, *k, *v, *att, *xmid, *ln2, *gate, *up;
  float *rstd1, *rstd2;
};

struct SavedLayout {
  int64_t bytes = 0;              // the region it spans
  std::vector<act_t*> resid;      // [layers + 1]: each layer's input, then the head's
  std::vector<LayerActs> acts;    // [slots], or [1] under activation checkpointing
};

// lc: this rank's share of the shape (layers, widths, checkpointing, token_chunk); tokens:
// the tensor-parallel group's tokens of the largest micro-batch the layout holds (this
// rank keeps ceil(tokens / tp) rows); slots: input slots for the layers (lc.layers: one
// each). base: the region's start (es bytes per activation), or null: only the size,
// every pointer null.
SavedLayout saved_layout(const ModelConfig& lc, int tp, int64_t tokens, int slots,
                         unsigned char* base, size_t es);

}  // namespace flexsp
