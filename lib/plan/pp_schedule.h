// The pipeline schedule (parallel.pp_schedule, docs/parallel.md): 1F1B runs whole
// micro-batches through the stages; Seq1F1B runs each micro-batch as parallel.seq_chunks
// chunks along its sequences (less activation memory, a smaller bubble).
#pragma once

#include <string>

#include "lib/util/enum_names.h"
#include "lib/util/error.h"

namespace flexsp {

enum class PpSchedule { one_f_one_b, seq1f1b };

template <>
struct EnumNames<PpSchedule> {
  static constexpr std::array all{std::pair{PpSchedule::one_f_one_b, "1f1b"},
                                  std::pair{PpSchedule::seq1f1b, "seq1f1b"}};
};

// "1f1b" or "seq1f1b"; anything else is an Error naming parallel.pp_schedule.
inline PpSchedule pp_schedule_parse(const std::string& s) {
  if (auto m = enum_parse<PpSchedule>(s)) return *m;
  fail(fmt::format("parallel.pp_schedule: '{}' is not one of {}", s, enum_choices<PpSchedule>()));
}
inline const char* pp_schedule_name(PpSchedule s) { return enum_name(s); }

// Chunks per micro-batch: seq_chunks under Seq1F1B, 1 under 1F1B.
inline int pp_chunks(PpSchedule s, int seq_chunks) {
  return s == PpSchedule::seq1f1b ? seq_chunks : 1;
}

}  // namespace flexsp
