#include "lib/plan/context_parallel.h"

#include "lib/plan/plan.h"
#include "lib/util/error.h"

namespace flexsp {

CpMode cp_mode_parse(const std::string& s) {
  if (auto m = enum_parse<CpMode>(s)) return *m;
  fail(fmt::format("parallel.cp_mode: '{}' is not one of {}", s, enum_choices<CpMode>()));
}

const char* cp_mode_name(CpMode m) { return enum_name(m); }

bool cp_group_runnable(CpMode m, int d, int heads, int kv_heads, int /*devices_per_node*/) {
  if (d < 1 || (d & (d - 1)) != 0) return false;
  return m != CpMode::ulysses || sp_group_runnable(heads, kv_heads, d);
}

CpSplit cp_split(CpMode m, int d, int heads, int kv_heads, int devices_per_node) {
  FLEXSP_CHECK(d >= 1 && (d & (d - 1)) == 0, "an SP group of {} devices: not a power of two", d);
  switch (m) {
    case CpMode::ulysses:
      FLEXSP_CHECK(sp_group_runnable(heads, kv_heads, d),
                   "an SP group of {} devices cannot run Ulysses on {} heads and {} kv heads per "
                   "tp rank (parallel.cp_mode = ulysses; ring, usp or auto allow wider groups)",
                   d, heads, kv_heads);
      return {d, 1};
    case CpMode::ring: return {1, d};
    case CpMode::usp:
    case CpMode::automatic: {
      int cap = d;
      if (m == CpMode::usp && devices_per_node > 0)
        while (cap > devices_per_node) cap /= 2;
      int u = cap;
      while (u > 1 && !sp_group_runnable(heads, kv_heads, u)) u /= 2;
      return {u, d / u};
    }
  }
  return {d, 1};
}

}  // namespace flexsp
