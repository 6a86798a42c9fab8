// PlanAhead (planner.h): one worker thread plans the steps rank 0 submits, in order.
#include <chrono>

#include "lib/planner/planner.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

PlanAhead::PlanAhead(PlannerContext ctx) : ctx_(std::move(ctx)), worker_([this] { run(); }) {}

PlanAhead::~PlanAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void PlanAhead::submit(int64_t step, std::vector<int64_t> lengths) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    FLEXSP_CHECK(!pending_.count(step), "PlanAhead: step {} submitted twice", step);
    pending_[step] = true;
    queue_.emplace_back(step, std::move(lengths));
  }
  cv_.notify_all();
}

Plan PlanAhead::wait(int64_t step, double* wait_ms, PlanStats* stats) {
  const Clock::time_point t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  FLEXSP_CHECK(pending_.count(step), "PlanAhead: step {} was never submitted", step);
  cv_.wait(lock, [&] { return done_.count(step) != 0; });
  Result r = std::move(done_.at(step));
  done_.erase(step);
  pending_.erase(step);
  lock.unlock();
  if (wait_ms) *wait_ms = ms_since(t0);
  if (r.error) std::rethrow_exception(r.error);
  if (stats) *stats = r.stats;
  return std::move(r.plan);
}

void PlanAhead::run() {
  for (;;) {
    std::pair<int64_t, std::vector<int64_t>> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Result r;
    try {
      r.plan = plan_step(ctx_, job.second, &r.stats);
    } catch (...) {
      r.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_[job.first] = std::move(r);
    }
    cv_.notify_all();
  }
}

}  // namespace flexsp
