#include "lib/util/timer.h"

#include "lib/util/error.h"

namespace flexsp {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data";
    case Phase::plan_wait: return "plan_wait";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::attention: return "attention";
    case Phase::all_to_all: return "all_to_all";
    case Phase::tp_comm: return "tp_comm";
    case Phase::pp_comm: return "pp_comm";
    case Phase::grad_reduce: return "grad_reduce";
    case Phase::optimizer: return "optimizer";
    case Phase::checkpoint: return "checkpoint";
    case Phase::count: break;
  }
  return "?";
}

bool host_phase(Phase p) {
  return p == Phase::data || p == Phase::plan_wait || p == Phase::checkpoint;
}

int WallClock::mark() {
  marks_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(marks_.size()) - 1;
}

double WallClock::elapsed_ms(int from, int to) {
  FLEXSP_ASSERT(from >= 0 && to >= from && to < static_cast<int>(marks_.size()));
  return std::chrono::duration<double, std::milli>(marks_[static_cast<size_t>(to)] -
                                                   marks_[static_cast<size_t>(from)])
      .count();
}

void PhaseTimes::clear() {
  ms.fill(0);
  pending.clear();
  if (clock != nullptr) clock->reset();
}

void PhaseTimes::resolve() {
  if (clock == nullptr) return;
  for (const Span& s : pending) add(s.phase, clock->elapsed_ms(s.from, s.to));
  pending.clear();
  clock->reset();
}

ScopedPhase::ScopedPhase(PhaseTimes* t, Phase p) : t_(t), p_(p) {
  if (t_ == nullptr) return;
  if (t_->clock != nullptr && !host_phase(p_))
    from_ = t_->clock->mark();
  else
    start_ = std::chrono::steady_clock::now();
}

ScopedPhase::~ScopedPhase() {
  if (t_ == nullptr) return;
  if (from_ < 0) {
    t_->add(p_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                    .count());
    return;
  }
  try {
    t_->pending.push_back({p_, from_, t_->clock->mark()});
  } catch (...) {  // a device error: the next operation reports it, not a destructor
  }
}

}  // namespace flexsp
