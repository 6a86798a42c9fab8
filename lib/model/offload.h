// Activation offload (docs/offload.md): what a layer keeps for its backward -- its input
// under activation checkpointing, every saved activation without -- goes to a host pool
// right after the layer's forward and comes back `ahead` layers before the layer's
// backward, on the backend's copy stream (Backend::copy_to_host_async / wait_copies), so
// the copies run while other layers compute.
//
// Design:
//  - The device holds a ring of slots instead of a block per layer: layer l's block lives
//    in slot l % slots. slots = ahead + 2: in forward a layer writes its own block and the
//    next one's input while the block two back is still being copied out; in backward
//    the layer being computed, the next one's input (rewritten by the recompute) and
//    `ahead` blocks on their way in. With that many layers or fewer nothing is offloaded.
//  - The model owns the ring (its workspace) and says which pieces of a slot a micro-batch
//    uses (spans: device pointer and bytes); this module owns the host pool, one block per
//    layer sized once for the model's largest micro-batch and reused by every micro-batch,
//    and the order: a slot is rewritten only after the copy of its previous block has
//    finished, a block is read only after its fetch has finished.
//  - What a slot holds is tracked per micro-batch: the last blocks of the forward are still
//    in their slots when the backward starts and are not fetched at all.
//  - A trace callback (tests) sees each copy queued and each wait, in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "lib/backend/backend.h"

namespace flexsp {

// A piece of a slot: backend memory and the bytes the micro-batch uses.
struct OffloadSpan {
  void* dev = nullptr;
  size_t bytes = 0;
};

// store: layer's block queued to the host; fetch: queued back to its slot; wait: the
// compute waits for the fetch before the layer's backward reads the block.
enum class OffloadStep { store, fetch, wait };
struct OffloadEvent {
  OffloadStep step;
  int layer;
};
using OffloadTrace = std::function<void(const OffloadEvent&)>;

class LayerOffload {
 public:
  // The device slots for `layers` layers fetched `ahead` (>= 1) layers ahead.
  static int ring_slots(int layers, int ahead) { return layers < ahead + 2 ? layers : ahead + 2; }
  // Whether the ring is smaller than one slot per layer (else there is nothing to gain).
  static bool useful(int layers, int ahead) { return ahead > 0 && ring_slots(layers, ahead) < layers; }

  // host_block_bytes: one layer's block at the model's largest micro-batch.
  LayerOffload(Backend& be, int layers, int ahead, size_t host_block_bytes);
  ~LayerOffload();
  LayerOffload(const LayerOffload&) = delete;
  LayerOffload& operator=(const LayerOffload&) = delete;

  int slots() const { return slots_; }
  int slot(int layer) const { return layer % slots_; }
  size_t host_bytes() const { return host_block_ * static_cast<size_t>(layers_); }
  void set_trace(OffloadTrace t) { trace_ = std::move(t); }

  // A micro-batch's forward starts; spans[s]: the pieces of slot s it uses.
  void begin_forward(std::vector<std::vector<OffloadSpan>> spans);
  // Layer l's forward writes the blocks of layers l and l + 1 (< layers).
  void before_forward(int l);
  // Layer l's forward is done: its block goes to the host.
  void after_forward(int l);
  // The backward starts (every store finished before a slot is rewritten).
  void begin_backward();
  // Layer l's backward starts: block l - ahead is fetched, block l waited for.
  void before_backward(int l);

 private:
  void claim(int l);
  void fetch(int l);
  void note(OffloadStep s, int l) {
    if (trace_) trace_({s, l});
  }
  unsigned char* host_block(int l) { return host_ + host_block_ * static_cast<size_t>(l); }

  Backend& be_;
  int layers_, ahead_, slots_;
  size_t host_block_;
  unsigned char* host_ = nullptr;
  std::vector<std::vector<OffloadSpan>> spans_;  // per slot
  std::vector<int> held_;          // per slot: the layer whose block it holds (-1: none)
  std::vector<uint64_t> stored_;   // per slot: the ticket of the store that reads it
  std::vector<uint64_t> fetched_;  // per layer: the ticket of its fetch, until waited for
  uint64_t last_store_ = 0;
  OffloadTrace trace_;
};

}  // namespace flexsp
