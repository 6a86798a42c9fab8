#include "lib/runtime/executor.h"


#include "lib/util/error.h"

namespace flexsp {

PlanExecutor::PlanExecutor(Backend& be, const ModelConfig& c, const SpGroups& groups,
                           int64_t max_local_tokens, int64_t max_group_tokens)
    : groups_(groups), tp_(groups.tp.size), model_(be, c, max_local_tokens, groups.tp),
      flat_(model_.params()),
      ulysses_(be, model_.local_config(), max_group_tokens, max_local_tokens),
      ring_(be, model_.local_config(), max_group_tokens, max_local_tokens) {}

ExecStats PlanExecutor::run(const Plan& plan, const std::vector<SeqRef>& batch,
                            const TokenDataset& ds, const float* params, float* grads,
                            double loss_scale, PhaseTimes* timers) {
  flat_.set(params, grads);
  return run(plan, batch, ds, flat_, loss_scale, timers);
}

ExecStats PlanExecutor::run(const Plan& plan, const std::vector<SeqRef>& batch,
                            const TokenDataset& ds, ParamProvider& params, double loss_scale,
                            PhaseTimes* timers) {
  ExecStats st;
  ulysses_.set_timers(timers);
  ring_.set_timers(timers);
  model_.set_timers(timers);
  const int rank = groups_.dp->world->rank();
  const int vocab = model_.config().vocab;
  std::vector<SeqRef> seqs;
  for (const PlanMicroBatch& mb : plan.micro_batches) {
    params.begin_micro_batch(&mb == &plan.micro_batches.back());
    const PlanGroup& g = plan_group_of(mb, rank);
    if (g.seqs.empty()) {
      if (params.collective()) {
        ScopedPhase timed(timers, Phase::backward);
        model_.idle_pass(params);
      }
      continue;
    }
    seqs.clear();
    for (int32_t i : g.seqs) seqs.push_back(batch[static_cast<size_t>(i)]);
    const ModelConfig& lc = model_.local_config();
    const CpSplit cp = g.size == 1 ? CpSplit{}
                                   : cp_split(groups_.cp_mode, g.size, lc.heads, lc.kv_heads,
                                              groups_.devices_per_node);
    {
      ScopedPhase timed(timers, Phase::data);
      load_micro_batch(ds, seqs, vocab, group_mb_);
      if (tp_ > 1 && cp.r == 1) pad_micro_batch(group_mb_, static_cast<int64_t>(g.size) * tp_);
    }
    ForwardResult fr;
    {
      ScopedPhase timed(timers, Phase::forward);
      if (g.size == 1) {
        fr = model_.forward(params, group_mb_.view());
      } else if (cp.r > 1) {
        fr = forward_ring(params, g.size, cp);
      } else {
        Comm& comm = groups_.dp->for_backend(CommPurpose::all_to_all).block(g.size);  // backend memory
        const int64_t T = static_cast<int64_t>(group_mb_.ids.size());
        const std::vector<int64_t> off = shard_offsets(T, g.size);
        const int j = comm.rank();
        const int64_t lo = off[j], n = off[j + 1] - off[j];
        ids_.assign(group_mb_.ids.begin() + lo, group_mb_.ids.begin() + lo + n);
        pos_.assign(group_mb_.positions.begin() + lo, group_mb_.positions.begin() + lo + n);
        targets_.assign(group_mb_.targets.begin() + lo, group_mb_.targets.begin() + lo + n);
        ulysses_.set_layout(comm, group_mb_.cu_seqlens.data(),
                            static_cast<int>(group_mb_.cu_seqlens.size()) - 1, off);
        MicroBatch local;
        local.tokens = n;
        local.ids = ids_.data();
        local.positions = pos_.data();
        local.targets = targets_.data();
        fr = model_.forward(params, local, &ulysses_);
      }
    }
    st.loss_sum += fr.loss_sum;
    st.local_tokens += static_cast<int64_t>(g.size == 1 ? group_mb_.ids.size() : ids_.size());
    {
      ScopedPhase timed(timers, Phase::backward);
      model_.backward(params, loss_scale);
    }
    ++st.micro_batches;
  }
  return st;
}

// Ring / USP (lib/runtime/ring_attention.h): this member's zigzag share of the group's
// stream, each ring position padded to u * tp tokens.
ForwardResult PlanExecutor::forward_ring(ParamProvider& params, int d, const CpSplit& cp) {
  const CommSet& set = groups_.dp->for_backend(CommPurpose::all_to_all);  // backend memory
  Comm& comm = set.block(d);
  const HostMicroBatch& m = group_mb_;
  const ZigzagLayout z =
      zigzag_layout(m.cu_seqlens.data(), static_cast<int>(m.cu_seqlens.size()) - 1, cp.r);
  const std::vector<int64_t> padded = cp_padded_tokens(z, cp.u * tp_);
  cp_local_tokens(m.ids.data(), m.positions.data(), m.targets.data(), z, padded, cp.u,
                  comm.rank(), ids_, pos_, targets_);
  ring_.set_layout(comm, set.block(cp.u), z, padded);
  MicroBatch local;
  local.tokens = static_cast<int64_t>(ids_.size());
  local.ids = ids_.data();
  local.positions = pos_.data();
  local.targets = targets_.data();
  return model_.forward(params, local, &ring_);
}

}  // namespace flexsp
