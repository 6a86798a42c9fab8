// The progress engine (design in progress.h).
#include "lib/comm/progress.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

}  // namespace

void require_mpi_thread_multiple(const char* who) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  FLEXSP_CHECK(provided >= MPI_THREAD_MULTIPLE,
               "{} needs MPI_THREAD_MULTIPLE, but this MPI provides {} (initialise MPI with "
               "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) and use an MPI built with thread "
               "support)",
               who, thread_level_name(provided));
}

ProgressEngine::ProgressEngine(std::chrono::microseconds min_sleep,
                               std::chrono::microseconds max_sleep)
    : min_sleep_(min_sleep), max_sleep_(std::max(min_sleep, max_sleep)) {
  require_mpi_thread_multiple("the communicators' progress engine");
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressEngine::watch(std::shared_ptr<ProgressTicket> t) {
  FLEXSP_ASSERT(t != nullptr);
  if (t->req == MPI_REQUEST_NULL) {  // nothing to progress
    t->done.store(true, std::memory_order_release);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_.push_back(std::move(t));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

bool ProgressEngine::reclaim(ProgressTicket& t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(watched_.begin(), watched_.end(),
                         [&](const std::shared_ptr<ProgressTicket>& w) { return w.get() == &t; });
  if (it == watched_.end()) return false;
  watched_.erase(it);
  return true;
}

size_t ProgressEngine::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watched_.size();
}

void ProgressEngine::run() {
  std::chrono::microseconds sleep = min_sleep_;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !watched_.empty(); });  // idle: no CPU
    if (stop_) return;
    reqs_.clear();
    for (const auto& t : watched_) reqs_.push_back(t->req);
    indices_.resize(reqs_.size());
    int completed = 0;
    MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &completed, indices_.data(),
                 MPI_STATUSES_IGNORE);
    polls_.fetch_add(1, std::memory_order_relaxed);
    if (completed != MPI_UNDEFINED && completed > 0) {
      for (int i = 0; i < completed; ++i) {
        ProgressTicket& t = *watched_[static_cast<size_t>(indices_[static_cast<size_t>(i)])];
        t.req = MPI_REQUEST_NULL;
        t.done.store(true, std::memory_order_release);
      }
      watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                    [](const std::shared_ptr<ProgressTicket>& t) {
                                      return t->done.load(std::memory_order_relaxed);
                                    }),
                     watched_.end());
      sleep = min_sleep_;
    } else {
      sleep = std::min(sleep * 2, max_sleep_);
    }
    // Sleeps with the lock released, so reclaim() and watch() never wait for a nap.
    cv_.wait_for(lock, sleep, [&] { return stop_; });
  }
}

}  // namespace flexsp
