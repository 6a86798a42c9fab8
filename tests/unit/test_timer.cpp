// Phase timers: nested phases add to their own totals. With a clock (a device backend's
// events; here a fake device whose clock advances only when the test says its queued work
// ran) a phase is the time between its marks, the host never waits at a boundary, the
// spans resolve once per step, and host phases keep the wall clock. WallClock (the CPU
// backend's) measures what the host does.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "lib/backend/backend.h"
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

// A device that runs what the host queued only when told (advance): its marks carry the
// device time at which the device reaches them.
class FakeDeviceClock final : public EventClock {
 public:
  double now = 0;  // device milliseconds
  int marks = 0, waits = 0;
  bool fail = false;
  int mark() override {
    if (fail) throw std::runtime_error("device error");
    times_.push_back(now);
    ++marks;
    return static_cast<int>(times_.size()) - 1;
  }
  double elapsed_ms(int from, int to) override {
    ++waits;
    return times_.at(static_cast<size_t>(to)) - times_.at(static_cast<size_t>(from));
  }
  void reset() override { times_.clear(); }
  size_t held() const { return times_.size(); }

 private:
  std::vector<double> times_;
};

TEST(PhaseTimer, ClockedPhasesResolveOncePerStep) {
  FakeDeviceClock dev;
  PhaseTimes t;
  t.clock = &dev;
  {
    ScopedPhase f(&t, Phase::forward);
    dev.now += 3;  // work queued in forward before attention
    {
      ScopedPhase a(&t, Phase::attention);
      dev.now += 5;
    }
    {
      ScopedPhase x(&t, Phase::all_to_all);
      dev.now += 2;
    }
  }
  {
    ScopedPhase d(&t, Phase::data);  // host work: wall clock even with a clock set
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  EXPECT_EQ(dev.waits, 0) << "a phase boundary waited for the device";
  EXPECT_EQ(t.get(Phase::forward), 0.0) << "clocked phases count only once resolved";
  EXPECT_GE(t.get(Phase::data), 3.0);
  EXPECT_EQ(t.pending.size(), 3u);
  t.resolve();
  EXPECT_DOUBLE_EQ(t.get(Phase::forward), 10.0);
  EXPECT_DOUBLE_EQ(t.get(Phase::attention), 5.0);
  EXPECT_DOUBLE_EQ(t.get(Phase::all_to_all), 2.0);
  EXPECT_TRUE(t.pending.empty());
  EXPECT_EQ(dev.held(), 0u) << "resolve resets the clock's marks";
  // A second step adds to the totals; clear() drops unresolved spans.
  {
    ScopedPhase b(&t, Phase::backward);
    dev.now += 7;
  }
  t.resolve();
  EXPECT_DOUBLE_EQ(t.get(Phase::backward), 7.0);
  { ScopedPhase b(&t, Phase::backward); }
  t.clear();
  EXPECT_TRUE(t.pending.empty());
  EXPECT_EQ(t.get(Phase::forward), 0.0);
  // A failing mark at the end of a phase is swallowed (the next op reports it); at the
  // start it propagates.
  {
    ScopedPhase g(&t, Phase::grad_reduce);
    dev.fail = true;
  }
  EXPECT_THROW({ ScopedPhase h(&t, Phase::optimizer); }, std::runtime_error);
}

TEST(PhaseTimer, WallClockIsTheCpuBackendsClock) {
  auto be = make_cpu_backend();
  std::unique_ptr<EventClock> clock = be->make_event_clock();
  ASSERT_NE(dynamic_cast<WallClock*>(clock.get()), nullptr);
  PhaseTimes t;
  t.clock = clock.get();
  {
    ScopedPhase f(&t, Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
  t.resolve();
  EXPECT_GE(t.get(Phase::forward), 4.0);
  EXPECT_LT(t.get(Phase::forward), 1000.0);
  const int a = clock->mark(), b = clock->mark();
  EXPECT_GE(clock->elapsed_ms(a, b), 0.0);
}

}  // namespace
}  // namespace flexsp
