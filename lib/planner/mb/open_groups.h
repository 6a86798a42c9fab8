// Open groups by size class: what mb_greedy's packing (mb_greedy.cpp) and mb_resize's
// re-assignment (mb_resize.cpp) share. Per size class the open groups sit in an ordered
// set keyed by (load, index), so "best fit under C" and "least loaded" are O(log g)
// lookups, which keeps planning thousands of sequences on a thousand devices cheap.
// Internal to lib/planner/mb/.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp::open_groups {

struct OpenGroup {
  int d = 1;
  double load = 0;
  int64_t tokens = 0;
  std::vector<int32_t> seqs;
};

// Groups by size class, each class ordered by (load, index).
struct Classes {
  const PlanCosts& c;
  std::vector<OpenGroup> groups;
  std::map<int, std::set<std::pair<double, int>>> by_d;

  explicit Classes(const PlanCosts& costs) : c(costs) {}
  int open(int d) {
    groups.push_back({d, 0, 0, {}});
    const int i = static_cast<int>(groups.size()) - 1;
    by_d[d].insert({0.0, i});
    return i;
  }
  // Re-keys group i at its new load, reusing the set's node (no allocation).
  void rekey(int i, double old_load) {
    auto& set = by_d[groups[i].d];
    auto node = set.extract({old_load, i});
    node.value().first = groups[i].load;
    set.insert(std::move(node));
  }
  void add(int i, int32_t s, int64_t l, double t) {
    OpenGroup& g = groups[i];
    const double old = g.load;
    g.load += t;
    g.tokens += l;
    g.seqs.push_back(s);
    rekey(i, old);
  }
  void remove(int i, size_t pos, int64_t l, double t) {
    OpenGroup& g = groups[i];
    const double old = g.load;
    g.load -= t;
    g.tokens -= l;
    g.seqs.erase(g.seqs.begin() + static_cast<std::ptrdiff_t>(pos));
    rekey(i, old);
  }
  bool room(int i, int64_t l) const {
    return c.holds(l, groups[i].d) && groups[i].tokens + l <= c.tokens_per_rank * groups[i].d;
  }
  // The group of size d with the largest load <= limit - t that has memory room (best fit).
  int best_fit(int d, int64_t l, double t, double limit) const {
    auto it = by_d.find(d);
    if (it == by_d.end()) return -1;
    const auto& set = it->second;
    auto pos = set.upper_bound({limit - t, std::numeric_limits<int>::max()});
    for (int tries = 0; pos != set.begin() && tries < 16; ++tries) {
      --pos;
      if (room(pos->second, l)) return pos->second;
    }
    return -1;
  }
  // The group of size d where s would finish earliest, memory permitting.
  int least_loaded(int d, int64_t l) const {
    auto it = by_d.find(d);
    if (it == by_d.end()) return -1;
    int tries = 0;
    for (const auto& [load, i] : it->second) {
      if (room(i, l)) return i;
      if (++tries >= 16) break;
    }
    return -1;
  }
};

// seqs longest first, equal lengths by index.
std::vector<int32_t> longest_first(const std::vector<int64_t>& len, std::vector<int32_t> seqs);

// No plan of seqs on groups of these sizes (ascending, distinct), devices in all, has a
// shorter makespan: the longest sequence on its fastest size, the least rank-time spread
// over the devices. Infinite when a sequence fits no size.
double floor_ms(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs,
                const std::vector<int>& sizes, int devices);

// The open groups placed (mb_place) and priced; not ok when they do not fit.
MbPlan to_plan(const PlanCosts& c, const std::vector<int64_t>& len,
               const std::vector<OpenGroup>& open);

}  // namespace flexsp::open_groups
