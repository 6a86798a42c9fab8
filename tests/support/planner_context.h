// The planner benchmark's setting for planner tests: GPT-7B figures (built-in cost model),
// 64 GPUs of 8 per node, 80 GB, ZeRO-3 over all GPUs (E = 17114 tokens per GPU), greedy
// plans (time limit 0); max_seq_len: the longest piece training makes (0: the step's
// longest). Tests change what they vary; planner_context_7b takes the GPU count, since
// ZeRO's groups follow it.
#pragma once

#include "lib/model/model_config.h"
#include "lib/planner/planner.h"

namespace flexsp::testing {

// The same setting on `gpus` GPUs (8 per node), ZeRO-3 over all of them.
inline PlannerContext planner_context_7b(int gpus, int64_t max_seq_len = 0) {
  PlannerContext c;
  ModelSection ms;
  ms.preset = "7b";
  c.model = resolve_model_config(ms, {}, 32000);
  c.world = gpus;
  c.ranks_per_node = 8;
  c.zero = {3, gpus, gpus, gpus};
  c.time_limit_ms = 0;
  c.max_seq_len = max_seq_len;
  return c;
}

inline PlannerContext planner_context_7b_64(int64_t max_seq_len = 0) {
  return planner_context_7b(64, max_seq_len);
}

}  // namespace flexsp::testing
