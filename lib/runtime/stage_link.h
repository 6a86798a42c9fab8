// A pipeline stage's link to its neighbours (docs/parallel.md): activations go to the next
// stage, their gradients come back, one rank to its partner, in schedule order.
//
// Design: on a transport whose send waits for the matching receive and runs in issue
// order on one stream (NCCL: every p2p of a communicator is queued on its stream), a
// stage that sends an activation and then waits for a gradient from the same neighbour
// deadlocks against that neighbour, which in 1F1B's steady state sends the gradient first
// and then waits for the activation. As Megatron does, the activation is held back and
// goes out in one group with that receive (send-forward-receive-backward), so both sides
// post both halves at once. Every other send starts at once, every other receive waits
// alone. On MPI (buffered, nonblocking sends) the pairing changes nothing but timing.
// A test replays every stage's calls under the rendezvous rule (a group completes when
// each of its operations' partners is posted) for many schedules
// (tests/unit/test_stage_link.cpp): no deadlock.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "lib/comm/comm.h"

namespace flexsp {

using CommRequests = std::vector<std::unique_ptr<CommRequest>>;

class StageLink {
 public:
  // comm: world ranks, backend memory; prev / next: my partners' ranks (-1: none, the
  // first / last stage). comm may be null for a one-stage pipeline.
  StageLink(Comm* comm, int prev, int next, DType t) : comm_(comm), prev_(prev), next_(next), t_(t) {}
  ~StageLink() = default;  // a held-back send is dropped (only an error leaves one)
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // The forward of a unit: its input from the previous stage (blocking; nothing on the
  // first stage). A held-back activation starts first, alone.
  void forward_in(void* buf, size_t count);
  // Its output to the next stage (nothing on the last): held back until the next call.
  // `owner` gets the request once started; buf stays untouched until owner's requests
  // complete.
  void forward_out(const void* buf, size_t count, CommRequests* owner);
  // The backward of a unit: its output's gradient from the next stage (blocking; nothing
  // on the last), in one group with a held-back activation to that stage.
  void backward_in(void* buf, size_t count);
  // Its input's gradient to the previous stage (nothing on the first): started at once.
  void backward_out(const void* buf, size_t count, CommRequests* owner);
  // Starts a held-back send (end of a step; before its buffer may change).
  void flush();

 private:
  Comm* comm_;
  int prev_, next_;
  DType t_;
  const void* held_ = nullptr;  // the activation held back, to next_
  size_t held_count_ = 0;
  CommRequests* held_owner_ = nullptr;
};

}  // namespace flexsp
