// Per-phase step timers (docs/reports.md): every rank adds wall time to named phases while
// a step runs; after the step the ranks reduce them to min / mean / max. Phases nest:
// forward and backward include their attention and all-to-all time, so the phases do not
// add up to the step time. A null PhaseTimes* disables timing at zero cost.
// On a GPU the ops only enqueue work, so wall time would land in whatever phase happens to
// wait: with `sync` set (the trainer sets it to the backend's synchronize() for a device
// backend) every phase boundary drains the device first, which costs the host's run-ahead
// at those few points (a handful per layer) and makes each phase's time its own.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>

namespace flexsp {

enum class Phase : int {
  data, plan_wait, forward, backward, attention, all_to_all, grad_reduce, optimizer,
  checkpoint, count
};
constexpr size_t kPhases = static_cast<size_t>(Phase::count);
const char* phase_name(Phase p);

struct PhaseTimes {
  std::array<double, kPhases> ms{};
  std::function<void()> sync;  // optional: waits for the device at phase boundaries
  void add(Phase p, double v) { ms[static_cast<size_t>(p)] += v; }
  double get(Phase p) const { return ms[static_cast<size_t>(p)]; }
  void clear() { ms.fill(0); }
};

class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* t, Phase p) : t_(t), p_(p) {
    if (t_ != nullptr && t_->sync) t_->sync();
    start_ = std::chrono::steady_clock::now();
  }
  ~ScopedPhase() {
    if (t_ == nullptr) return;
    try {
      if (t_->sync) t_->sync();
    } catch (...) {  // a device error: the next operation reports it, not a destructor
    }
    t_->add(p_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimes* t_;
  Phase p_;
  std::chrono::steady_clock::time_point start_;
};

class Comm;

// Min, mean and max over the ranks of comm of each phase (collective).
struct PhaseStats {
  PhaseTimes min, mean, max;
};
PhaseStats phase_stats(const PhaseTimes& mine, Comm& comm);

}  // namespace flexsp
