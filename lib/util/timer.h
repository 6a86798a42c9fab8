// Per-phase step timers (docs/reports.md): every rank adds time to named phases while a step
// runs; after the step the ranks reduce them to min / mean / max (lib/comm/phase_stats.h).
// Phases nest: forward
// and backward include their attention and all-to-all time, so the phases do not add up
// to the step time. A null PhaseTimes* disables timing at zero cost.
//
// Two ways to read time:
//  - Without a clock (PhaseTimes::clock null) a phase is the host's wall time between its
//    start and its end: right where the host does the work (the CPU backend).
//  - With a clock (an EventClock: the backend's, Backend::make_event_clock) a phase is
//    the time between two marks in the order of the device's work. On a GPU the ops only
//    enqueue work, so the host's wall time would land in whichever phase happens to wait;
//    the CUDA clock records events on the compute stream instead, and nothing waits at a
//    phase boundary: the marks are resolved into milliseconds by resolve(), once per step,
//    after the step's one synchronization. A blocking collective's phase (all-to-all)
//    ends at the mark after it, which the compute stream reaches once the collective is
//    done, so it counts the collective as the compute stream saw it (peers included).
//    The host phases (data, plan wait, checkpoint: no device work) always read the wall
//    clock. The CPU backend's clock is WallClock, which gives the same numbers as no clock.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

namespace flexsp {

enum class Phase : int {
  data, plan_wait, forward, backward, attention, all_to_all, tp_comm, pp_comm, grad_reduce,
  optimizer, checkpoint, count
};
constexpr size_t kPhases = static_cast<size_t>(Phase::count);
const char* phase_name(Phase p);
// Phases of host work only, timed on the host's wall clock even when a clock is set.
bool host_phase(Phase p);

// Timestamps in the order of a device's work.
class EventClock {
 public:
  virtual ~EventClock() = default;
  // Marks "now" in the device's order of work; the id is valid until reset().
  virtual int mark() = 0;
  // Milliseconds from mark `from` to mark `to`; may wait for the device to reach them.
  virtual double elapsed_ms(int from, int to) = 0;
  // Forgets every mark (their storage is reused).
  virtual void reset() = 0;
};

// The host's steady clock as an EventClock (host backends: work is done when marked).
class WallClock final : public EventClock {
 public:
  int mark() override;
  double elapsed_ms(int from, int to) override;
  void reset() override { marks_.clear(); }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

struct PhaseTimes {
  std::array<double, kPhases> ms{};
  EventClock* clock = nullptr;  // optional (see above); not owned
  struct Span {
    Phase phase;
    int from, to;
  };
  std::vector<Span> pending;  // clocked phases not yet resolved

  void add(Phase p, double v) { ms[static_cast<size_t>(p)] += v; }
  double get(Phase p) const { return ms[static_cast<size_t>(p)]; }
  // Zeroes the times and drops unresolved spans (and the clock's marks).
  void clear();
  // Adds every pending span's time, then resets the clock. Call once the device has
  // reached the last mark (after the step's synchronization); it waits otherwise.
  void resolve();
};

class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* t, Phase p);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimes* t_;
  Phase p_;
  int from_ = -1;  // the clock's mark, or -1: wall time from start_
  std::chrono::steady_clock::time_point start_;
};

// Each phase's min, mean and max over ranks (lib/comm/phase_stats.h computes them).
struct PhaseStats {
  PhaseTimes min, mean, max;
};

}  // namespace flexsp
