// One pipeline stage's run of a plan (see pipeline.h): the schedule's steps in order, each
// unit in slot unit % slots, activations and gradients to and from the neighbours.
#include "lib/runtime/pipeline.h"

#include <algorithm>
#include <chrono>

#include "lib/model/cut_costs.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/runtime/group_tokens.h"
#include "lib/runtime/ring_chunks.h"
#include "lib/runtime/stage_link.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// Seq1F1B in an SP group of several devices: the chunk attention is Ulysses' core on the
// rank's heads. Ulysses hands its core (HeadAttention) no layer index, so this op -- what
// the model sees -- notes the layer, then hands over to Ulysses, whose core it also is.
class ChunkedUlysses final : public AttentionOp, private HeadAttention {
 public:
  void bind(UlyssesAttention* u, SeqChunkAttention* c) {
    u_ = u;
    c_ = c;
    u->set_core(this);
  }
  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override {
    layer_ = layer;
    u_->forward(layer, q, k, v, out);
  }
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override {
    layer_ = layer;
    u_->backward(layer, dout, q, k, v, out, dq, dk, dv);
  }

 private:
  void forward(act_t* o, float*, const act_t* q, const act_t* k, const act_t* v) override {
    c_->forward(layer_, q, k, v, o);
  }
  void backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                const act_t* k, const act_t* v, const act_t* o, const float*) override {
    c_->backward(layer_, dout, q, k, v, o, dq, dk, dv);
  }

  UlyssesAttention* u_ = nullptr;
  SeqChunkAttention* c_ = nullptr;
  int layer_ = 0;
};

}  // namespace

struct PipelineExecutor::Slot {
  std::unique_ptr<Llama> model;
  std::unique_ptr<UlyssesAttention> ulysses;
  std::unique_ptr<RingAttention> ring;            // groups with a ring (r > 1)
  std::unique_ptr<SeqChunkAttention> chunk_attn;  // seq1f1b
  std::unique_ptr<RingChunkAttention> ring_chunk;  // seq1f1b in groups with a ring
  ChunkedUlysses chunked;                         // seq1f1b in groups of several devices
  HostMicroBatch group_mb;  // the group's whole stream
  MemberTokens mine;        // this rank's share of it (groups of several)
  MicroBatch local;
  AttentionOp* attn = nullptr;  // null: the model's LocalAttention
  bool active = false;          // holds a unit between its forward and its backward
  int64_t rows = 0;             // this rank's rows of the residual stream
  int64_t cap = 0;              // tokens the model is sized for
  std::vector<std::unique_ptr<CommRequest>> sends;

  void wait_sends() {
    for (auto& r : sends) r->wait();
    sends.clear();
  }
};

PipelineExecutor::PipelineExecutor(Backend& be, const ModelConfig& c, const SpGroups& groups,
                                   int64_t max_local_tokens, int64_t max_group_tokens,
                                   const PipelineRole& role)
    : be_(be), cfg_(c), groups_(groups), max_local_(max_local_tokens),
      max_group_(max_group_tokens), tp_(groups.tp), role_(role),
      table_(make_param_table(c, tp_.size, tp_.rank)) {
  FLEXSP_ASSERT(role.stages == 1 || role.p2p != nullptr);
  FLEXSP_ASSERT((role.prev >= 0) == (role.stage > 0) && (role.next >= 0) == (role.stage < role.stages - 1));
  if (role.chunks > 1)
    scratch_ = std::make_unique<SeqChunkScratch>();
  slot(0);  // the first slot up front: a bad shape fails at set-up
}

PipelineExecutor::~PipelineExecutor() {
  for (auto& s : slots_) s->wait_sends();
}

void PipelineExecutor::build(Slot& s, int64_t cap) {
  s.ring_chunk.reset();
  s.chunk_attn.reset();
  s.ulysses.reset();
  s.model.reset();
  s.model = std::make_unique<Llama>(be_, cfg_, cap, tp_,
                                    LlamaStage{role_.stage == 0, role_.stage == role_.stages - 1});
  s.model->set_timers(timers_);
  if (role_.chunks > 1) {
    s.chunk_attn = std::make_unique<SeqChunkAttention>(be_, s.model->local_config(), *scratch_);
    s.chunk_attn->set_timers(timers_);
  }
  s.ulysses = std::make_unique<UlyssesAttention>(be_, s.model->local_config(), max_group_);
  s.ulysses->set_timers(timers_);
  s.cap = cap;
}

void PipelineExecutor::account(size_t before) {
  held_ += static_cast<int64_t>(be_.allocated_bytes()) - static_cast<int64_t>(before);
  stats_.activation_bytes = std::max(stats_.activation_bytes, static_cast<size_t>(std::max<int64_t>(held_, 0)));
}

void PipelineExecutor::fit(Slot& s, int64_t tokens) {
  if (tokens <= s.cap) return;
  build(s, std::min(max_local_, std::max(tokens, s.cap + s.cap / 4)));
}

PipelineExecutor::Slot& PipelineExecutor::slot(int i) {
  while (static_cast<int>(slots_.size()) <= i) {
    const size_t before = be_.allocated_bytes();
    auto s = std::make_unique<Slot>();
    const int C = role_.chunks;
    build(*s, C == 1 ? max_local_ : std::min(max_local_, (max_local_ + C - 1) / C + tp_.size));
    slots_.push_back(std::move(s));
    account(before);
  }
  return *slots_[static_cast<size_t>(i)];
}

// Ulysses: this rank's shard of s.group_mb (group_tokens.h) and Ulysses' layout for it.
void PipelineExecutor::take_shard(Slot& s, const PlanGroup& g) {
  Comm& comm = groups_.dp->for_backend(CommPurpose::all_to_all).block(g.size);
  const HostMicroBatch& h = s.group_mb;
  const std::vector<int64_t> off = ulysses_share(h, g.size, comm.rank(), s.mine);
  fit(s, static_cast<int64_t>(s.mine.ids.size()));
  s.ulysses->set_layout(comm, h.cu_seqlens.data(), static_cast<int>(h.cu_seqlens.size()) - 1, off);
  s.ulysses->set_core(nullptr);
  s.local = s.mine.view();
  s.attn = s.ulysses.get();
}

CpSplit PipelineExecutor::split(int d) const {
  if (d == 1) return CpSplit{};
  const ModelConfig lc = tp_local_config(cfg_, tp_.size);
  return cp_split(groups_.cp_mode, d, lc.heads, lc.kv_heads, groups_.devices_per_node);
}

// Ring / USP: this rank's zigzag share of s.group_mb and the slot's ring layout. Under
// Seq1F1B s.group_mb is the chunk and the slot's RingChunkAttention runs it.
void PipelineExecutor::take_ring_share(Slot& s, const PlanGroup& g, const CpSplit& cp) {
  const CommSet& set = groups_.dp->for_backend(CommPurpose::all_to_all);
  Comm& comm = set.block(g.size);
  const RingShare r = ring_share(s.group_mb, cp, tp_.size, comm.rank(), s.mine);
  fit(s, static_cast<int64_t>(s.mine.ids.size()));
  if (!s.ring) s.ring = std::make_unique<RingAttention>(be_, s.model->local_config(), max_group_);
  s.ring->set_timers(timers_);
  if (role_.chunks > 1) {
    if (!s.ring_chunk)
      s.ring_chunk = std::make_unique<RingChunkAttention>(be_, s.model->local_config(), *scratch_);
    s.ring_chunk->set_layout(*s.ring, comm, set.block(cp.u), r.layout, r.padded, ring_ops_);
  } else {
    s.ring->set_layout(comm, set.block(cp.u), r.layout, r.padded);
  }
  s.local = s.mine.view();
  s.attn = role_.chunks > 1 ? static_cast<AttentionOp*>(s.ring_chunk.get()) : s.ring.get();
}

bool PipelineExecutor::prepare(Slot& s, const PlanMicroBatch& mb, const std::vector<SeqRef>& batch,
                               const TokenDataset& ds, PhaseTimes* timers) {
  const PlanGroup& g = plan_group_of(mb, groups_.dp->world->rank());
  if (g.seqs.empty()) return false;
  ScopedPhase timed(timers, Phase::data);
  const CpSplit cp = split(g.size);
  load_group_stream(ds, batch, g, cfg_.vocab, tp_.size, cp, seqs_, s.group_mb);
  if (g.size == 1) {
    s.local = s.group_mb.view();
    s.attn = nullptr;
  } else if (cp.r > 1) {
    take_ring_share(s, g, cp);
  } else {
    take_shard(s, g);
  }
  s.rows = s.local.tokens / tp_.size;
  return true;
}

bool PipelineExecutor::prepare_chunk(Slot& s, const PlanMicroBatch& mb, int j,
                                     const std::vector<SeqRef>& batch, const TokenDataset& ds,
                                     PhaseTimes* timers) {
  const PlanGroup& g = plan_group_of(mb, groups_.dp->world->rank());
  if (g.seqs.empty()) return false;
  ScopedPhase timed(timers, Phase::data);
  if (j == 0) {
    load_group(ds, batch, g, cfg_.vocab, seqs_, whole_);
    double lin = 0, att = 0;
    seq_chunk_costs(cfg_, &lin, &att);
    seq_chunks_cut(whole_, role_.chunks, lin, att, chunks_);
    real_ = static_cast<int>(whole_.cu_seqlens.size()) - 1;
    chunk_ops_.clear();
    ring_ops_.clear();
  }
  s.group_mb = chunks_[static_cast<size_t>(j)];
  if (s.group_mb.ids.empty()) return false;  // every segment empty: on every stage alike
  const CpSplit cp = split(g.size);
  if (cp.r > 1) {  // the chunk's zigzag share; the ring carries the earlier chunks' keys
    take_ring_share(s, g, cp);
    ring_ops_.push_back(s.ring_chunk.get());
    s.rows = s.local.tokens / tp_.size;
    return true;
  }
  if (g.size * tp_.size > 1) pad_micro_batch(s.group_mb, static_cast<int64_t>(g.size) * tp_.size);
  const int nseq = static_cast<int>(s.group_mb.cu_seqlens.size()) - 1;
  if (g.size == 1) {
    fit(s, static_cast<int64_t>(s.group_mb.ids.size()));
    s.local = s.group_mb.view();
    const ModelConfig& lc = s.model->local_config();
    s.chunk_attn->set_layout(s.group_mb.cu_seqlens.data(), nseq, real_, chunk_ops_, lc.heads,
                             lc.kv_heads);
    s.attn = s.chunk_attn.get();
  } else {  // the chunk attention is Ulysses' core, on this rank's heads
    take_shard(s, g);
    s.chunk_attn->set_layout(s.group_mb.cu_seqlens.data(), nseq, real_, chunk_ops_,
                             s.ulysses->heads_per_rank(), s.ulysses->kv_heads_per_rank());
    s.chunked.bind(s.ulysses.get(), s.chunk_attn.get());
    s.attn = &s.chunked;
  }
  chunk_ops_.push_back(s.chunk_attn.get());
  s.rows = s.local.tokens / tp_.size;
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

// What one run() carries from step to step of the schedule.
struct PipelineExecutor::Run {
  const Plan& plan;
  const std::vector<SeqRef>& batch;
  const TokenDataset& ds;
  ParamProvider& pp;
  double loss_scale;
  PhaseTimes* timers;
  StageLink link;
  std::vector<int> free_slots;  // slots holding no unit
  std::vector<int> slot_of;     // per unit: its slot between forward and backward (-1: none)
  std::vector<bool> counted;    // per micro-batch: counted in ExecStats
  ExecStats st;
};

ExecStats PipelineExecutor::run(const Plan& plan, const std::vector<SeqRef>& batch,
                                const TokenDataset& ds, ParamProvider& pp, double loss_scale,
                                PhaseTimes* timers) {
  const int P = role_.stages, me = role_.stage, C = role_.chunks;
  const int M = static_cast<int>(plan.micro_batches.size());
  const int held = std::max(1, pipeline_in_flight(P, me, M, C));
  const Clock::time_point start = Clock::now();
  Run r{plan, batch, ds, pp, loss_scale, timers,
        StageLink(role_.p2p, role_.prev, role_.next, be_.act_dtype()), {},
        std::vector<int>(static_cast<size_t>(M * C), -1), std::vector<bool>(static_cast<size_t>(M), false), {}};
  timers_ = timers;
  for (int i = held - 1; i >= 0; --i) {
    Slot& s = slot(i);
    s.active = false;
    s.model->set_timers(timers);
    if (s.ulysses) s.ulysses->set_timers(timers);
    if (s.chunk_attn) s.chunk_attn->set_timers(timers);
    r.free_slots.push_back(i);
  }
  for (const PipeStep& step : pipeline_schedule(P, me, M, C)) {
    // The step's first unit of weights (a ZeRO-3 gather) starts now, on every rank, and
    // runs while this one waits for its neighbour.
    const int L = cfg_.layers;
    pp.prefetch(step.forward ? (me == 0 ? 0 : 1) : (me == P - 1 ? L + 1 : L));
    if (step.forward)
      forward_unit(r, step.unit);
    else
      backward_unit(r, step.unit);
  }
  r.link.flush();
  for (auto& s : slots_) s->wait_sends();
  stats_.wall_ms += ms_since(start);
  ++stats_.steps;
  return r.st;
}

void PipelineExecutor::forward_unit(Run& r, int unit) {
  const int C = role_.chunks;
  const PlanMicroBatch& mb = r.plan.micro_batches[static_cast<size_t>(unit / C)];
  FLEXSP_ASSERT(!r.free_slots.empty());
  Slot& s = slot(r.free_slots.back());
  s.wait_sends();  // the slot's last output and input gradient are delivered
  const size_t before = be_.allocated_bytes();  // a slot may grow, Ulysses' buffers too
  s.active = C == 1 ? prepare(s, mb, r.batch, r.ds, r.timers)
                    : prepare_chunk(s, mb, unit % C, r.batch, r.ds, r.timers);
  account(before);
  if (!s.active) {  // nothing here on any stage; a collective provider still hears the calls
    if (r.pp.collective()) {
      ScopedPhase timed(r.timers, Phase::forward);
      s.model->idle_forward(r.pp);
    }
    return;
  }
  r.slot_of[static_cast<size_t>(unit)] = r.free_slots.back();
  r.free_slots.pop_back();
  const size_t count = static_cast<size_t>(s.rows) * static_cast<size_t>(cfg_.hidden);
  ScopedPhase timed(r.timers, Phase::forward);
  {
    ScopedPhase p2p(r.timers, Phase::pp_comm);
    const Clock::time_point t = Clock::now();
    r.link.forward_in(s.model->stage_input(), count);
    stats_.p2p_ms += ms_since(t);
  }
  const Clock::time_point t = Clock::now();
  r.st.loss_sum += s.model->forward(r.pp, s.local, s.attn).loss_sum;
  stats_.forward_ms += ms_since(t);
  ++stats_.units;
  r.st.local_tokens += s.local.tokens;
  r.link.forward_out(s.model->stage_output(), count, &s.sends);
}

void PipelineExecutor::backward_unit(Run& r, int unit) {
  const int si = r.slot_of[static_cast<size_t>(unit)];
  if (si < 0) {
    if (r.pp.collective()) {
      ScopedPhase timed(r.timers, Phase::backward);
      slot(0).model->idle_backward(r.pp);
    }
    return;
  }
  Slot& s = slot(si);
  const size_t count = static_cast<size_t>(s.rows) * static_cast<size_t>(cfg_.hidden);
  ScopedPhase timed(r.timers, Phase::backward);
  {
    ScopedPhase p2p(r.timers, Phase::pp_comm);
    const Clock::time_point t = Clock::now();
    r.link.backward_in(s.model->stage_grad(), count);
    stats_.p2p_ms += ms_since(t);
  }
  r.link.flush();
  s.wait_sends();  // the output is delivered before a recompute may rewrite it
  const Clock::time_point t = Clock::now();
  s.model->backward(r.pp, r.loss_scale);
  stats_.backward_ms += ms_since(t);
  r.link.backward_out(s.model->stage_grad(), count, &s.sends);
  s.active = false;
  r.free_slots.push_back(si);
  const size_t m = static_cast<size_t>(unit / role_.chunks);
  if (!r.counted[m]) {
    r.counted[m] = true;
    ++r.st.micro_batches;
  }
}

}  // namespace flexsp
