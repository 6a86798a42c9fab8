// Context parallelism inside one SP group (docs/parallel.md): a group of d devices runs as
// u x r -- Ulysses over u (all-to-alls that trade token shards for head shards, so u is
// capped by the heads) times a ring over r (blocks of keys and values passed from rank to
// rank, no cap: USP, arXiv 2405.07719). The split is a pure function of the mode, d, the
// heads per tensor-parallel rank and the devices per node, so that the planner, which
// prices a group, and the runtime, which runs it, always agree on it.
//
// Member j of a group (j = rank - first, in devices) is Ulysses index j % u at ring
// position j / u: Ulysses sub-groups are blocks of u consecutive devices (inside a node
// when u <= devices per node), and each ring strides u.
//
//   ulysses  u = d, r = 1 (the group must be one Ulysses can run: sp_group_runnable)
//   ring     u = 1, r = d
//   auto     u = the widest power of two <= d that Ulysses can run, r = d / u: Ulysses as
//            wide as the heads allow, the ring for the rest
//   usp      as auto, and u stays inside a node (u <= devices per node)
#pragma once

#include <string>

#include "lib/util/enum_names.h"

namespace flexsp {

enum class CpMode { ulysses, ring, usp, automatic };

template <>
struct EnumNames<CpMode> {
  static constexpr std::array all{std::pair{CpMode::ulysses, "ulysses"}, std::pair{CpMode::ring, "ring"},
                                  std::pair{CpMode::usp, "usp"}, std::pair{CpMode::automatic, "auto"}};
};

// "ulysses", "ring", "usp" or "auto"; anything else is an Error naming parallel.cp_mode.
CpMode cp_mode_parse(const std::string& s);
const char* cp_mode_name(CpMode m);

struct CpSplit {
  int u = 1;  // Ulysses width
  int r = 1;  // ring length
};

// heads, kv_heads: per tensor-parallel rank (tp_local_config); devices_per_node: ranks per
// node / tp (0: unbounded). d: a power of two. Throws Error when the mode cannot run a
// group of d (only ulysses can fail: d must split the heads).
CpSplit cp_split(CpMode m, int d, int heads, int kv_heads, int devices_per_node);
// The same test without throwing.
bool cp_group_runnable(CpMode m, int d, int heads, int kv_heads, int devices_per_node);

}  // namespace flexsp
