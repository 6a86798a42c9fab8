// How a run's plans are made (parallel.sp_mode, docs/planner.md): flexsp plans every step
// over SP groups of any size, static runs every sequence on groups of parallel.sp_size
// devices, batch_adaptive picks one group size per step (the baselines of the paper).
#pragma once

#include "lib/util/enum_names.h"

namespace flexsp {

enum class SpMode { flexsp, static_sp, batch_adaptive };

template <>
struct EnumNames<SpMode> {
  static constexpr std::array all{std::pair{SpMode::flexsp, "flexsp"},
                                  std::pair{SpMode::static_sp, "static"},
                                  std::pair{SpMode::batch_adaptive, "batch_adaptive"}};
};

inline const char* sp_mode_name(SpMode m) { return enum_name(m); }

}  // namespace flexsp
