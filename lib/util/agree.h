// Ending a run cleanly across MPI ranks.
//
// Bad input is detected in start-up phases that every rank runs (config, grid, dataset
// validation, checkpoint load). agree() runs such a phase on every rank and then lets the
// ranks agree: if any rank failed, rank 0 prints the first failing rank's message as one
// line and every rank throws AgreedFailure, which main() turns into exit code 1 after
// MPI_Finalize -- no MPI_Abort banner, no hang. An Error outside an agree() phase cannot
// be agreed on (the other ranks may be blocked in a collective), so main() prints it and
// calls MPI_Abort, which ends every rank.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace flexsp {

// Thrown on every rank after agree() saw a failure; the message was already printed.
struct AgreedFailure {
  int exit_code = 1;
};

// Runs fn on every rank of comm; collective. Throws AgreedFailure on every rank if fn
// threw on any rank.
void agree(MPI_Comm comm, const std::function<void()>& fn);

// The one-line error format used everywhere: "flexsp: error: <msg>".
void print_error(const std::string& msg);

}  // namespace flexsp
