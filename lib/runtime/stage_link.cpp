#include "lib/runtime/stage_link.h"

#include "lib/util/error.h"

namespace flexsp {

void StageLink::flush() {
  if (held_owner_ == nullptr) return;
  held_owner_->push_back(comm_->start_send_recv(held_, held_count_, next_, nullptr, 0, -1, t_));
  held_owner_ = nullptr;
  held_ = nullptr;
}

void StageLink::forward_in(void* buf, size_t count) {
  flush();
  if (prev_ >= 0) comm_->send_recv(nullptr, 0, -1, buf, count, prev_, t_);
}

void StageLink::forward_out(const void* buf, size_t count, CommRequests* owner) {
  if (next_ < 0) return;
  flush();
  held_ = buf;
  held_count_ = count;
  held_owner_ = owner;
}

void StageLink::backward_in(void* buf, size_t count) {
  if (next_ < 0) {
    flush();
    return;
  }
  if (held_owner_ == nullptr) {
    comm_->send_recv(nullptr, 0, -1, buf, count, next_, t_);
    return;
  }
  // One group: the activation out and the gradient in. Waiting for it completes both, so
  // the owner has nothing left to wait for.
  comm_->send_recv(held_, held_count_, next_, buf, count, next_, t_);
  held_owner_ = nullptr;
  held_ = nullptr;
}

void StageLink::backward_out(const void* buf, size_t count, CommRequests* owner) {
  flush();
  if (prev_ >= 0) owner->push_back(comm_->start_send_recv(buf, count, prev_, nullptr, 0, -1, t_));
}

}  // namespace flexsp
