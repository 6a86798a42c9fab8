// Activation offload's order of copies and waits (offload.h).
#include "lib/model/offload.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

LayerOffload::LayerOffload(Backend& be, int layers, int ahead, size_t host_block_bytes)
    : be_(be), layers_(layers), ahead_(ahead), slots_(ring_slots(layers, ahead)),
      host_block_((host_block_bytes + 63) / 64 * 64) {
  FLEXSP_CHECK(ahead >= 1, "train.offload_ahead: must be >= 1, got {}", ahead);
  FLEXSP_ASSERT(layers >= 1);
  host_ = static_cast<unsigned char*>(be_.alloc_host(host_bytes()));
  held_.assign(static_cast<size_t>(slots_), -1);
  stored_.assign(static_cast<size_t>(slots_), 0);
  fetched_.assign(static_cast<size_t>(layers_), 0);
}

LayerOffload::~LayerOffload() {
  be_.synchronize();  // no copy may still touch the pool
  be_.free_host(host_);
}

void LayerOffload::begin_forward(std::vector<std::vector<OffloadSpan>> spans) {
  FLEXSP_ASSERT(static_cast<int>(spans.size()) == slots_);
  for (const auto& s : spans) {
    size_t bytes = 0;
    for (const OffloadSpan& p : s) bytes += p.bytes;
    FLEXSP_ASSERT(bytes <= host_block_);
  }
  spans_ = std::move(spans);
  std::fill(held_.begin(), held_.end(), -1);
  std::fill(fetched_.begin(), fetched_.end(), 0);
}

void LayerOffload::claim(int l) {
  const size_t s = static_cast<size_t>(slot(l));
  if (held_[s] == l) return;
  be_.wait_copies(stored_[s]);  // the previous block's copy to the host has read the slot
  held_[s] = l;
}

void LayerOffload::before_forward(int l) {
  claim(l);
  if (l + 1 < layers_) claim(l + 1);
}

void LayerOffload::after_forward(int l) {
  const size_t s = static_cast<size_t>(slot(l));
  unsigned char* h = host_block(l);
  uint64_t t = 0;
  for (const OffloadSpan& p : spans_[s]) {
    t = be_.copy_to_host_async(h, p.dev, p.bytes);
    h += p.bytes;
  }
  stored_[s] = t;
  last_store_ = std::max(last_store_, t);
  note(OffloadStep::store, l);
}

void LayerOffload::begin_backward() {
  // The recompute of a layer rewrites the next layer's input in its slot: no store may
  // still read it. The head's backward ran since the last store was queued.
  be_.wait_copies(last_store_);
  std::fill(stored_.begin(), stored_.end(), 0);
  for (int l = layers_ - 1; l >= 0 && l >= layers_ - ahead_; --l) fetch(l);
}

void LayerOffload::fetch(int l) {
  const size_t s = static_cast<size_t>(slot(l));
  if (held_[s] == l) return;  // still there since the forward, or already on its way
  // The slot's block (a later layer's) was last read by that layer's backward, issued
  // before this copy, which starts after it.
  const unsigned char* h = host_block(l);
  uint64_t t = 0;
  for (const OffloadSpan& p : spans_[s]) {
    t = be_.copy_from_host_async(p.dev, h, p.bytes);
    h += p.bytes;
  }
  held_[s] = l;
  fetched_[static_cast<size_t>(l)] = t;
  note(OffloadStep::fetch, l);
}

void LayerOffload::before_backward(int l) {
  if (l - ahead_ >= 0) fetch(l - ahead_);
  fetch(l);  // nothing when it came ahead or never left
  uint64_t& t = fetched_[static_cast<size_t>(l)];
  if (t != 0) {
    be_.wait_copies(t);
    note(OffloadStep::wait, l);
    t = 0;
  }
}

}  // namespace flexsp
