// A progress engine for MPI's nonblocking collectives: a thread that tests outstanding
// requests while the caller computes, so that a started collective really advances
// beside compute instead of only inside the next MPI call.
//
// Why: Open MPI (Debian's 4.1, "OMPI progress: no") runs the rounds of a nonblocking
// collective (libnbc schedules) only when some MPI call on this process progresses them.
// A started all-gather or reduce-scatter would otherwise sit at its first round while the
// rank computes a layer, and the whole transfer would happen in wait().
//
// Design choices:
//  - Owned by the communicator set (Groups::progress; every MPI Comm of the set holds a
//    shared_ptr), never a global; Comms made without one progress in MPI calls only.
//  - Needs MPI_THREAD_MULTIPLE (the engine tests requests while the main thread makes
//    other MPI calls); the constructor checks the provided level and throws naming it.
//  - The thread starts on the first request and sleeps on a condition variable whenever
//    nothing is outstanding: an idle engine costs no CPU. While requests are outstanding
//    it calls MPI_Testsome, then sleeps, the sleep doubling from min_sleep up to max_sleep
//    while nothing completes (the CI machine runs 8 ranks on 2 cores: it must not spin)
//    and starting short again after a completion (the next round of a schedule is ready).
//  - A request is owned by exactly one thread at a time: the engine while it is watched,
//    the waiter once reclaim() took it back (MPI forbids two threads completing one
//    request). Completion is published through an atomic flag that done() reads without
//    calling MPI, so a test can tell that the engine, not the caller, completed it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flexsp {

// One watched MPI request and its completion flag.
struct ProgressTicket {
  MPI_Request req = MPI_REQUEST_NULL;
  std::atomic<bool> done{false};
};

class ProgressEngine {
 public:
  // Throws Error unless MPI provides MPI_THREAD_MULTIPLE.
  explicit ProgressEngine(std::chrono::microseconds min_sleep = std::chrono::microseconds(50),
                          std::chrono::microseconds max_sleep = std::chrono::microseconds(1000));
  ~ProgressEngine();  // stops the thread; requests still watched are left to their owners
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Watches t->req until it completes (then sets t->done and t->req = MPI_REQUEST_NULL).
  void watch(std::shared_ptr<ProgressTicket> t);
  // Takes t back if the engine still watches it: true, and the caller now completes
  // t.req itself; false when it completed (t.done is set).
  bool reclaim(ProgressTicket& t);

  // Requests watched now, and the rounds of MPI_Testsome so far (tests, diagnostics).
  size_t outstanding() const;
  size_t polls() const { return polls_.load(); }

 private:
  void run();

  const std::chrono::microseconds min_sleep_, max_sleep_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<ProgressTicket>> watched_;
  std::vector<MPI_Request> reqs_;  // scratch for MPI_Testsome, reused
  std::vector<int> indices_;
  bool stop_ = false;
  std::atomic<size_t> polls_{0};
  std::thread thread_;  // started by the first watch()
};

// The thread level MPI provides (MPI_Query_thread), and a check that it is
// MPI_THREAD_MULTIPLE: throws Error naming what was provided (`who` says who needs it).
void require_mpi_thread_multiple(const char* who);

}  // namespace flexsp
