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
    const ModelConfig& lc = model_.local_config();
    const CpSplit cp = g.size == 1 ? CpSplit{}
                                   : cp_split(groups_.cp_mode, g.size, lc.heads, lc.kv_heads,
                                              groups_.devices_per_node);
    {
      ScopedPhase timed(timers, Phase::data);
      load_group_stream(ds, batch, g, model_.config().vocab, tp_, cp, seqs_, group_mb_);
    }
    ForwardResult fr;
    int64_t tokens = 0;
    {
      ScopedPhase timed(timers, Phase::forward);
      AttentionOp* attn = nullptr;  // LocalAttention over the view's sequences
      if (g.size > 1) attn = cp.r > 1 ? static_cast<AttentionOp*>(&ring_) : &ulysses_;
      MicroBatch view = g.size == 1 ? group_mb_.view() : member_view(g.size, cp);
      // Whether its blocks go to the host (a model built without offload keeps them).
      view.offload = mb.offload;
      fr = model_.forward(params, view, attn);
      tokens = view.tokens;
    }
    st.loss_sum += fr.loss_sum;
    st.local_tokens += tokens;
    {
      ScopedPhase timed(timers, Phase::backward);
      model_.backward(params, loss_scale);
    }
    ++st.micro_batches;
  }
  return st;
}

// This member's share of group_mb_ (group_tokens.h) and its attention op's layout.
MicroBatch PlanExecutor::member_view(int d, const CpSplit& cp) {
  const CommSet& set = groups_.dp->for_backend(CommPurpose::all_to_all);  // backend memory
  Comm& comm = set.block(d);
  if (cp.r > 1) {
    const RingShare r = ring_share(group_mb_, cp, tp_, comm.rank(), mine_);
    ring_.set_layout(comm, set.block(cp.u), r.layout, r.padded);
  } else {
    const std::vector<int64_t> off = ulysses_share(group_mb_, d, comm.rank(), mine_);
    ulysses_.set_layout(comm, group_mb_.cu_seqlens.data(),
                        static_cast<int>(group_mb_.cu_seqlens.size()) - 1, off);
  }
  return mine_.view();
}

}  // namespace flexsp
