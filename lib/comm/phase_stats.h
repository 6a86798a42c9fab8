// The per-phase step times of every rank (lib/util/timer.h) reduced over a communicator:
// each phase's min, mean and max, as the progress lines and timing reports show them.
#pragma once

#include "lib/comm/comm.h"
#include "lib/util/timer.h"

namespace flexsp {

// Collective over comm (host memory).
PhaseStats phase_stats(const PhaseTimes& mine, Comm& comm);

}  // namespace flexsp
