// Phase timers: nested phases add to their own totals; with a sync hook (a device backend)
// every phase boundary waits for the device, so work enqueued inside a phase is counted
// there and not in whichever phase happens to wait next.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lib/util/timer.h"

namespace flexsp {
namespace {

TEST(PhaseTimer, NestsAndAccumulates) {
  PhaseTimes t;
  {
    ScopedPhase f(&t, Phase::forward);
    ScopedPhase a(&t, Phase::attention);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  { ScopedPhase a(&t, Phase::attention); }
  EXPECT_GE(t.get(Phase::attention), 5.0);
  EXPECT_GE(t.get(Phase::forward), t.get(Phase::attention) - 1.0);
  EXPECT_EQ(t.get(Phase::backward), 0.0);
  ScopedPhase off(nullptr, Phase::forward);  // disabled: no effect, no crash
}

TEST(PhaseTimer, SyncAtEveryBoundary) {
  PhaseTimes t;
  int syncs = 0;
  // A "device" whose pending work takes 4 ms: drained at the boundaries, it is timed
  // inside the phase that enqueued it.
  bool pending = false;
  t.sync = [&] {
    ++syncs;
    if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(4));
    pending = false;
  };
  {
    ScopedPhase f(&t, Phase::forward);
    pending = true;  // enqueued, not waited for
  }
  { ScopedPhase g(&t, Phase::grad_reduce); }
  EXPECT_EQ(syncs, 4);
  EXPECT_GE(t.get(Phase::forward), 4.0);
  EXPECT_LT(t.get(Phase::grad_reduce), 4.0);
  t.sync = [] { throw std::runtime_error("device error"); };
  EXPECT_THROW({ ScopedPhase h(&t, Phase::optimizer); }, std::runtime_error);  // at the start
}

}  // namespace
}  // namespace flexsp
