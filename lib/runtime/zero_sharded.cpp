// ZeRO stage 3 (zero.h): no full-size buffer at all. Each rank keeps its shards of every
// parameter unit and serves the model unit by unit from a small pool of full-unit slots
// (allocated on first use, reused every step): gathers before a unit computes, frees
// after, and reduce-scatters each unit's gradient into its shard while the next unit's
// backward runs.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lib/runtime/zero_parts.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

class ZeroSharded final : public ZeroBase, private ParamProvider {
 public:
  ZeroSharded(Backend& be, const ParamTable& table, const ParallelSection& p,
              const ZeroPeers& peers);

  ParamProvider& provider() override { return *this; }
  void set_params(const float* host) override;
  void get_params(float* host) override;
  ShardRanges state_shards() const override;
  ShardRanges param_shards() const override;
  void get_state(float* params, float* exp_avg, float* exp_avg_sq) override;
  void set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) override;
  int64_t adam_steps() const override;
  void set_adam_steps(int64_t s) override;
  void zero_grads() override;
  double step(const OptimSection& o, double lr, PhaseTimes* timers) override;

 private:
  // One parameter unit. Flat positions may lie past `end` (padding pieces).
  struct Unit {
    int64_t begin = 0, end = 0, padded = 0;  // flat range; padded: multiple of the world
    int64_t pblock = 0, sblock = 0;          // param piece and sub-piece lengths
    int64_t pflat = 0, sflat = 0;            // flat start of my param piece, my sub-piece
    int64_t poff = 0, goff = 0;              // where they live in pshard_ / gshard_
    int64_t gflat = 0;                       // flat start of my gradient piece
    std::unique_ptr<AdamW> adamw;            // my optimizer piece, clipped to [begin, end)
  };
  struct Slot {
    Buffer<float> buf;
    int unit = -1;  // -1: free, -2: its reduce-scatter is under way
    bool grad = false;
    bool act = false;  // weights in the backend's act_dtype (bf16), not fp32
    std::unique_ptr<CommRequest> gather;  // started into buf (prefetch), not yet completed
  };
  Slot& take_slot(int u, bool grad, bool act = false);
  Slot* find_slot(int u, bool grad, bool act = false);
  // Starts unit u's gather into a new slot (act: the act-dtype copy), and completes a
  // slot's gather (if started and not yet completed).
  Slot& start_gather(int u, bool act);
  static void complete_gather(Slot& s);
  // pshard_act_ = pshard_ in the act dtype (after every change of pshard_).
  void refresh_act_shard();
  // Completes the started reduce-scatter (if any): adds it to the gradient shard, frees
  // its slot.
  void finish_reduce();
  // ParamProvider
  const float* unit_params(int u) override;
  float* unit_grads(int u) override;
  void unit_done(int u, bool backward) override;
  const act_t* unit_act_params(int u) override;
  void prefetch(int u) override;
  bool collective() const override { return true; }

  Comm* pcomm_ = nullptr;      // parameter group (gradient reductions)
  Comm* pgather_ = nullptr;    // the same group over the parameter-gather communicators
  Comm* phost_ = nullptr;      // the same group, host set
  Comm* outer_ = nullptr;      // cross_node when the parameter group is the node, else null
  bool grad_node_ = false, optim_node_ = false;
  std::vector<Unit> units_;
  Buffer<float> pshard_, gshard_;
  Buffer<float> scratch_, scratch2_;  // a param piece, a sub-piece
  // With bf16 activations: my param pieces in bf16, what the model's weights are gathered
  // from (half the bytes of an fp32 gather; the same values as casting after it).
  Buffer<unsigned char> pshard_act_;
  std::vector<Slot> slots_;
  int64_t slot_size_ = 0;
  struct Reduction {
    std::unique_ptr<CommRequest> req;  // null: none under way
    int unit = -1;
    size_t slot = 0;  // index into slots_ (which may grow meanwhile)
  } reducing_;
};

ZeroSharded::ZeroSharded(Backend& be, const ParamTable& table, const ParallelSection& p,
                         const ZeroPeers& peers)
    : ZeroBase(be, table, p, peers) {
  const bool param_node = p.zero_param_group == ZeroGroup::node;
  const CommSet& bc = groups_.for_backend(CommPurpose::grad_reduce);
  const CommSet& gc = groups_.for_backend(CommPurpose::param_gather);
  pcomm_ = param_node ? bc.node.get() : bc.world.get();
  pgather_ = param_node ? gc.node.get() : gc.world.get();
  phost_ = param_node ? groups_.node.get() : groups_.world.get();
  outer_ = param_node ? bc.cross_node.get() : nullptr;
  grad_node_ = p.zero_grad_group == ZeroGroup::node;
  optim_node_ = p.zero_optim_group == ZeroGroup::node;
  const int64_t W = groups_.world->size(), Gp = pcomm_->size(), Go = outer_ ? outer_->size() : 1;
  FLEXSP_ASSERT(Gp * Go == W);
  const int64_t pr = pcomm_->rank(), orank = outer_ ? outer_->rank() : 0;
  int64_t poff = 0, goff = 0, maxp = 0, maxs = 0;
  units_.resize(static_cast<size_t>(param_units(table_)));
  for (int u = 0; u < param_units(table_); ++u) {
    Unit& a = units_[static_cast<size_t>(u)];
    a.begin = param_unit_begin(table_, u);
    a.end = param_unit_end(table_, u);
    a.padded = (a.end - a.begin + W - 1) / W * W;
    a.pblock = a.padded / Gp;
    a.sblock = a.pblock / Go;
    a.pflat = a.begin + pr * a.pblock;
    a.sflat = a.pflat + orank * a.sblock;
    a.poff = poff;
    a.goff = goff;
    a.gflat = grad_node_ ? a.pflat : a.sflat;
    poff += a.pblock;
    goff += grad_node_ ? a.pblock : a.sblock;
    const int64_t oflat = optim_node_ ? a.pflat : a.sflat;
    const int64_t oblock = optim_node_ ? a.pblock : a.sblock;
    a.adamw = std::make_unique<AdamW>(be_, table_, std::min(oflat, a.end),
                                      std::min(oflat + oblock, a.end));
    maxp = std::max(maxp, a.pblock);
    maxs = std::max(maxs, a.sblock);
    slot_size_ = std::max(slot_size_, a.padded);
  }
  pshard_ = Buffer<float>(be_, static_cast<size_t>(poff));
  if (be_.act_dtype() != DType::f32)
    pshard_act_ = Buffer<unsigned char>(be_, static_cast<size_t>(poff) * be_.act_size());
  gshard_ = Buffer<float>(be_, static_cast<size_t>(goff));
  scratch_ = Buffer<float>(be_, static_cast<size_t>(maxp));
  scratch2_ = Buffer<float>(be_, static_cast<size_t>(maxs));
  slots_.reserve(8);
}

void ZeroSharded::set_params(const float* host) {
  for (const Unit& a : units_) {
    const int64_t n = std::min(a.pflat + a.pblock, a.end) - a.pflat;
    if (n > 0)
      be_.copy_from_host(pshard_.get() + a.poff, host + a.pflat, static_cast<size_t>(n) * sizeof(float));
  }
  refresh_act_shard();
}

void ZeroSharded::get_params(float* host) {
  for (int u = 0; u < param_units(table_); ++u) {
    const Unit& a = units_[static_cast<size_t>(u)];
    be_.copy_to_host(host + a.begin, unit_params(u),
                     static_cast<size_t>(a.end - a.begin) * sizeof(float));
    unit_done(u, false);
  }
}

// ---- checkpoint state ----------------------------------------------------------------------

ShardRanges ZeroSharded::state_shards() const {
  ShardRanges s;
  for (const Unit& a : units_) s.ranges.emplace_back(a.adamw->begin(), a.adamw->end());
  if (optim_node_ && outer_ != nullptr) {
    s.replica = outer_->rank();
    s.replicas = outer_->size();
  }
  return s;
}

ShardRanges ZeroSharded::param_shards() const {
  ShardRanges s;
  for (const Unit& a : units_) {
    const int64_t b = std::min(a.pflat, a.end);
    s.ranges.emplace_back(b, std::min(a.pflat + a.pblock, a.end));
  }
  if (outer_ != nullptr) {
    s.replica = outer_->rank();
    s.replicas = outer_->size();
  }
  return s;
}

void ZeroSharded::get_state(float* params, float* exp_avg, float* exp_avg_sq) {
  for (Unit& a : units_) {
    AdamW& o = *a.adamw;
    const size_t bytes = static_cast<size_t>(o.end() - o.begin()) * sizeof(float);
    if (bytes == 0) continue;
    be_.copy_to_host(params, pshard_.get() + a.poff + (o.begin() - a.pflat), bytes);
    be_.copy_to_host(exp_avg, o.exp_avg(), bytes);
    be_.copy_to_host(exp_avg_sq, o.exp_avg_sq(), bytes);
    const int64_t n = o.end() - o.begin();
    params += n, exp_avg += n, exp_avg_sq += n;
  }
}

void ZeroSharded::set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) {
  for (Unit& a : units_) {
    const int64_t n = std::max<int64_t>(0, std::min(a.pflat + a.pblock, a.end) - a.pflat);
    if (n > 0) be_.copy_from_host(pshard_.get() + a.poff, params, static_cast<size_t>(n) * sizeof(float));
    params += n;
    AdamW& o = *a.adamw;
    const size_t bytes = static_cast<size_t>(o.end() - o.begin()) * sizeof(float);
    if (bytes == 0) continue;
    be_.copy_from_host(o.exp_avg(), exp_avg, bytes);
    be_.copy_from_host(o.exp_avg_sq(), exp_avg_sq, bytes);
    exp_avg += o.end() - o.begin(), exp_avg_sq += o.end() - o.begin();
  }
  refresh_act_shard();
}

int64_t ZeroSharded::adam_steps() const {
  int64_t s = 0;  // padding pieces never step
  for (const Unit& a : units_) s = std::max(s, a.adamw->steps());
  return s;
}

void ZeroSharded::set_adam_steps(int64_t s) {
  for (Unit& a : units_) a.adamw->set_steps(s);
}

void ZeroSharded::zero_grads() {
  finish_reduce();  // a step that did not reach step(): its gradients are dropped
  be_.zero(gshard_.get(), gshard_.bytes());
}

// ---- the model's view ---------------------------------------------------------------------

constexpr int kReducing = -2;  // Slot::unit of the slot whose reduce-scatter is under way

ZeroSharded::Slot* ZeroSharded::find_slot(int u, bool grad, bool act) {
  for (Slot& s : slots_)
    if (s.unit == u && s.grad == grad && s.act == act) return &s;
  return nullptr;
}

ZeroSharded::Slot& ZeroSharded::take_slot(int u, bool grad, bool act) {
  Slot* s = nullptr;
  for (Slot& f : slots_)
    if (f.unit == -1) {
      s = &f;
      break;
    }
  if (s == nullptr) {  // grows to the most units ever used at once (2-4), then stays
    slots_.emplace_back();
    s = &slots_.back();
    s->buf = Buffer<float>(be_, static_cast<size_t>(slot_size_));
  }
  s->unit = u;
  s->grad = grad;
  s->act = act;
  return *s;
}

void ZeroSharded::refresh_act_shard() {
  if (pshard_act_.size() == 0) return;
  be_.cast(pshard_act_.get(), be_.act_dtype(), pshard_.get(), DType::f32,
           static_cast<int64_t>(pshard_.size()));
}

ZeroSharded::Slot& ZeroSharded::start_gather(int u, bool act) {
  const Unit& a = units_[static_cast<size_t>(u)];
  Slot& s = take_slot(u, false, act);  // bf16 in an fp32-sized slot: room to spare
  if (act)
    s.gather = pgather_->start_all_gather(
        pshard_act_.get() + static_cast<size_t>(a.poff) * be_.act_size(), s.buf.get(),
        static_cast<size_t>(a.pblock), be_.act_dtype());
  else
    s.gather = pgather_->start_all_gather(pshard_.get() + a.poff, s.buf.get(),
                                          static_cast<size_t>(a.pblock), DType::f32);
  return s;
}

void ZeroSharded::complete_gather(Slot& s) {
  if (!s.gather) return;
  s.gather->wait();
  s.gather.reset();
}

const act_t* ZeroSharded::unit_act_params(int u) {
  if (pshard_act_.size() == 0) return nullptr;
  Slot* s = find_slot(u, false, true);
  if (s == nullptr) s = &start_gather(u, true);  // not prefetched: gathered now
  complete_gather(*s);
  return s->buf.get();
}

void ZeroSharded::prefetch(int u) {
  const bool act = pshard_act_.size() != 0;
  if (find_slot(u, false, act) == nullptr) start_gather(u, act);
}

const float* ZeroSharded::unit_params(int u) {
  Slot* s = find_slot(u, false);
  if (s == nullptr) s = &start_gather(u, false);
  complete_gather(*s);
  return s->buf.get();
}

float* ZeroSharded::unit_grads(int u) {
  if (Slot* s = find_slot(u, true)) return s->buf.get();
  const Unit& a = units_[static_cast<size_t>(u)];
  float* g = take_slot(u, true).buf.get();
  be_.zero(g, static_cast<size_t>(a.padded) * sizeof(float));
  return g;
}

void ZeroSharded::unit_done(int u, bool backward) {
  const Unit& a = units_[static_cast<size_t>(u)];
  if (Slot* s = find_slot(u, true)) {
    if (backward) {
      // Reduce-scatter over the parameter group into my param piece (scratch_), started
      // now and finished after the next unit's backward (finish_reduce). One under way
      // at a time: scratch_ is its destination.
      finish_reduce();
      reducing_.unit = u;
      reducing_.slot = static_cast<size_t>(s - slots_.data());
      reducing_.req = pcomm_->start_reduce_scatter(s->buf.get(), scratch_.get(),
                                                   static_cast<size_t>(a.pblock), DType::f32,
                                                   ReduceOp::sum);
      s->unit = kReducing;  // neither free nor found: a tied embedding asks for its gradient again
    } else {
      s->unit = -1;
    }
  }
  // A weight slot is free again; one whose gather the model never completed (it cannot
  // be reused while the gather writes it) is completed first.
  for (bool act : {false, true})
    if (Slot* s = find_slot(u, false, act)) {
      complete_gather(*s);
      s->unit = -1;
    }
}

void ZeroSharded::finish_reduce() {
  if (!reducing_.req) return;
  reducing_.req->wait();
  reducing_.req.reset();
  // Into my param piece; then (gradients over the world, parameters within the node)
  // across nodes into my sub-piece.
  const Unit& a = units_[static_cast<size_t>(reducing_.unit)];
  float* g = gshard_.get() + a.goff;
  if (grad_node_ || outer_ == nullptr) {
    be_.axpy(g, scratch_.get(), a.pblock, 1.0f);
  } else {
    outer_->reduce_scatter(scratch_.get(), scratch2_.get(), static_cast<size_t>(a.sblock),
                           DType::f32, ReduceOp::sum);
    be_.axpy(g, scratch2_.get(), a.sblock, 1.0f);
  }
  slots_[reducing_.slot].unit = -1;
}

// ---- the step ----------------------------------------------------------------------------

double ZeroSharded::step(const OptimSection& o, double lr, PhaseTimes* timers) {
  std::optional<ScopedPhase> timed(std::in_place, timers, Phase::grad_reduce);
  finish_reduce();
  for (Slot& s : slots_) {  // none should be left: the update rewrites pshard_
    complete_gather(s);
    if (!s.grad && s.unit >= 0) s.unit = -1;  // stale after the update: gathered again
  }
  float* g = gshard_.get();
  const size_t G = gshard_.size();
  // A tied embedding's copies (first and last pipeline stage): the partner on the other
  // stage holds the same position in an equal parameter group, so the embedding unit's
  // pieces have the same bounds there and sum shard by shard.
  if (peers_.tied) {
    const Unit& e = units_[0];
    peers_.tied->all_reduce(g + e.goff, g + e.goff, static_cast<size_t>(grad_node_ ? e.pblock : e.sblock),
                           DType::f32, ReduceOp::sum);
  }
  const bool across = outer_ != nullptr && outer_->size() > 1;
  if (grad_node_ && across) outer_->all_reduce(g, g, G, DType::f32, ReduceOp::sum);
  // Gradient pieces are disjoint over the world (grad group world) or over the node
  // (grad group node: replicated across nodes), padding zero.
  double excluded = 0;
  for (const Unit& a : units_) {
    const int64_t lo = std::max(a.gflat, a.begin);
    const int64_t hi = std::min(a.gflat + (grad_node_ ? a.pblock : a.sblock), a.end);
    if (lo >= hi) continue;
    float* x = g + a.goff + (lo - a.gflat);
    const double copies = tp_reduce(x, lo, hi, timers);
    // The last stage's copy of a tied embedding (unit 0) is left out of the norm whole.
    excluded += peers_.skip_embedding && &a == &units_[0] ? be_.sum_squares(x, hi - lo) : copies;
  }
  double sumsq = be_.sum_squares(g, static_cast<int64_t>(G)) - excluded;
  (grad_node_ ? *phost_ : *groups_.world).all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  sum_over_tp_and_stages(&sumsq);
  timed.emplace(timers, Phase::optimizer);
  double scale = 0, norm = 0;
  if (!clip(sumsq, o, &scale, &norm)) return norm;
  for (Unit& a : units_) {
    const int64_t ob = a.adamw->begin();
    if (a.adamw->end() == ob) continue;  // a padding piece
    a.adamw->step(pshard_.get() + a.poff + (ob - a.pflat), g + a.goff + (ob - a.gflat), o, lr,
                  scale);
  }
  if (!optim_node_ && across) {
    // Re-assemble each param piece from the updated sub-pieces of the other nodes.
    for (const Unit& a : units_) {
      const size_t S = static_cast<size_t>(a.sblock);
      float* piece = pshard_.get() + a.poff;
      be_.copy(scratch2_.get(), piece + (a.sflat - a.pflat), S * sizeof(float));
      outer_->all_gather(scratch2_.get(), piece, S, DType::f32);
    }
  }
  refresh_act_shard();
  return norm;
}

}  // namespace

std::unique_ptr<ZeroOptimizer> make_zero_sharded(Backend& be, const ParamTable& table,
                                                 const ParallelSection& p, const ZeroPeers& peers) {
  return std::make_unique<ZeroSharded>(be, table, p, peers);
}

}  // namespace flexsp
