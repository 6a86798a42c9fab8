// ZeRO stages 0-3 (see zero.h for the layout). Stages 0-2 keep full replicas of the
// parameters and gradients; stage 3 keeps shards and serves the model unit by unit from
// a small pool of full-unit slots (allocated on first use, reused every step).
#include "lib/runtime/zero.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "lib/util/error.h"

namespace flexsp {

void zero_check(const ParallelSection& p) {
  FLEXSP_CHECK(p.zero >= 0 && p.zero <= 3, "parallel.zero: must be 0..3, got {}", p.zero);
  FLEXSP_CHECK(p.zero != 2 || p.zero_grad_group == p.zero_optim_group,
               "parallel.zero_grad_group: with ZeRO stage 2 gradients are sharded like the "
               "optimizer states, so it must equal parallel.zero_optim_group ('{}')",
               enum_name(p.zero_optim_group));
  if (p.zero != 3) return;
  FLEXSP_CHECK(p.zero_param_group == ZeroGroup::node || p.zero_grad_group == ZeroGroup::world,
               "parallel.zero_grad_group: with ZeRO stage 3 and parameters sharded over the "
               "world, gradients must be sharded over 'world' too (got '{}')",
               enum_name(p.zero_grad_group));
  FLEXSP_CHECK(p.zero_grad_group == ZeroGroup::node || p.zero_optim_group == ZeroGroup::world,
               "parallel.zero_optim_group: with ZeRO stage 3 and gradients sharded over the "
               "world, optimizer states must be sharded over 'world' too (got '{}'); "
               "supported (param, grad, optim) groups: (world, world, world), "
               "(node, world, world), (node, node, world), (node, node, node)",
               enum_name(p.zero_optim_group));
}

// One parameter unit at stage 3. Flat positions may lie past `end` (padding pieces).
struct ZeroOptimizer::Unit {
  int64_t begin = 0, end = 0, padded = 0;  // flat range; padded: multiple of the world
  int64_t pblock = 0, sblock = 0;          // param piece and sub-piece lengths
  int64_t pflat = 0, sflat = 0;            // flat start of my param piece, my sub-piece
  int64_t poff = 0, goff = 0;              // where they live in pshard_ / gshard_
  int64_t gflat = 0;                       // flat start of my gradient piece
  std::unique_ptr<AdamW> adamw;            // my optimizer piece, clipped to [begin, end)
};

ZeroOptimizer::ZeroOptimizer(Backend& be, const ParamTable& table, const ParallelSection& p,
                             const ZeroPeers& peers)
    : be_(be), table_(table), stage_(p.zero), groups_(*peers.dp), peers_(peers), flat_(table) {
  zero_check(p);
  FLEXSP_ASSERT(peers_.tp == 1 || peers_.tp_blocks != nullptr);
  if (peers_.tp > 1) replicated_ = tp_replicated_ranges(table);
  if (stage_ == 3) {
    init_stage3(p);
    return;
  }
  const bool optim_node = p.zero_optim_group == ZeroGroup::node;
  const CommSet& bc = groups_.for_backend();
  shard_comm_ = optim_node ? bc.node.get() : bc.world.get();
  shard_host_ = optim_node ? groups_.node.get() : groups_.world.get();
  const int64_t shards = stage_ == 0 ? 1 : shard_comm_->size();
  padded_ = (table.total + shards - 1) / shards * shards;
  block_ = padded_ / shards;
  const int me = stage_ == 0 ? 0 : shard_comm_->rank();
  begin_ = std::min<int64_t>(me * block_, table.total);
  end_ = std::min<int64_t>(begin_ + block_, table.total);
  params_ = Buffer<float>(be, static_cast<size_t>(padded_));
  grads_ = Buffer<float>(be, static_cast<size_t>(padded_));
  if (stage_ >= 1) scratch_ = Buffer<float>(be, static_cast<size_t>(block_));
  adamw_ = std::make_unique<AdamW>(be, table, begin_, end_);
  flat_.set(params_.get(), grads_.get());
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::init_stage3(const ParallelSection& p) {
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

ParamProvider& ZeroOptimizer::provider() {
  if (stage_ == 3) return *this;
  if (overlaps_reduce()) return reducing_flat_;
  return flat_;
}

void ZeroOptimizer::ReducingFlat::begin_micro_batch(bool last) {
  last_ = last;
  dones_.assign(static_cast<size_t>(param_units(z_.table_)), 0);
}

void ZeroOptimizer::ReducingFlat::unit_done(int u, bool backward) {
  if (!backward || !last_) return;
  // With tied embeddings the embedding's gradient is handed out twice per backward (its
  // lm_head part, then the lookup): it is final after the second.
  const int expected = u == 0 && z_.table_.tied ? 2 : 1;
  if (++dones_[static_cast<size_t>(u)] != expected) return;
  const int64_t b = param_unit_begin(z_.table_, u), e = param_unit_end(z_.table_, u);
  float* g = z_.grads_.get() + b;
  z_.unit_reductions_.push_back(z_.groups_.for_backend().world->start_all_reduce(
      g, g, static_cast<size_t>(e - b), DType::f32, ReduceOp::sum));
}

void ZeroOptimizer::set_params(const float* host) {
  if (stage_ != 3) {
    be_.copy_from_host(params_.get(), host, static_cast<size_t>(table_.total) * sizeof(float));
    return;
  }
  for (const Unit& a : units_) {
    const int64_t n = std::min(a.pflat + a.pblock, a.end) - a.pflat;
    if (n > 0)
      be_.copy_from_host(pshard_.get() + a.poff, host + a.pflat, static_cast<size_t>(n) * sizeof(float));
  }
  refresh_act_shard();
}

void ZeroOptimizer::get_params(float* host) {
  if (stage_ != 3) {
    be_.copy_to_host(host, params_.get(), static_cast<size_t>(table_.total) * sizeof(float));
    return;
  }
  for (int u = 0; u < param_units(table_); ++u) {
    const Unit& a = units_[static_cast<size_t>(u)];
    be_.copy_to_host(host + a.begin, unit_params(u),
                     static_cast<size_t>(a.end - a.begin) * sizeof(float));
    unit_done(u, false);
  }
}

// ---- checkpoint state ----------------------------------------------------------------------

ShardRanges ZeroOptimizer::state_shards() const {
  ShardRanges s;
  if (stage_ != 3) {
    s.ranges.emplace_back(begin_, end_);
    if (stage_ == 0) {
      s.replica = groups_.world->rank();
      s.replicas = groups_.world->size();
    } else if (shard_host_ != groups_.world.get()) {
      s.replica = groups_.cross_node->rank();
      s.replicas = groups_.cross_node->size();
    }
    return s;
  }
  for (const Unit& a : units_) s.ranges.emplace_back(a.adamw->begin(), a.adamw->end());
  if (optim_node_ && outer_ != nullptr) {
    s.replica = outer_->rank();
    s.replicas = outer_->size();
  }
  return s;
}

ShardRanges ZeroOptimizer::param_shards() const {
  ShardRanges s;
  if (stage_ != 3) {
    s.ranges.emplace_back(0, table_.total);
    s.replica = groups_.world->rank();
    s.replicas = groups_.world->size();
    return s;
  }
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

void ZeroOptimizer::get_state(float* params, float* exp_avg, float* exp_avg_sq) {
  auto out = [&](const float* p, AdamW& o) {
    const size_t bytes = static_cast<size_t>(o.end() - o.begin()) * sizeof(float);
    if (bytes == 0) return;
    be_.copy_to_host(params, p, bytes);
    be_.copy_to_host(exp_avg, o.exp_avg(), bytes);
    be_.copy_to_host(exp_avg_sq, o.exp_avg_sq(), bytes);
    const int64_t n = o.end() - o.begin();
    params += n, exp_avg += n, exp_avg_sq += n;
  };
  if (stage_ != 3) return out(params_.get() + begin_, *adamw_);
  for (Unit& a : units_) out(pshard_.get() + a.poff + (a.adamw->begin() - a.pflat), *a.adamw);
}

void ZeroOptimizer::set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) {
  auto in = [&](AdamW& o) {
    const size_t bytes = static_cast<size_t>(o.end() - o.begin()) * sizeof(float);
    if (bytes == 0) return;
    be_.copy_from_host(o.exp_avg(), exp_avg, bytes);
    be_.copy_from_host(o.exp_avg_sq(), exp_avg_sq, bytes);
    exp_avg += o.end() - o.begin(), exp_avg_sq += o.end() - o.begin();
  };
  if (stage_ != 3) {
    set_params(params);
    return in(*adamw_);
  }
  for (Unit& a : units_) {
    const int64_t n = std::max<int64_t>(0, std::min(a.pflat + a.pblock, a.end) - a.pflat);
    if (n > 0) be_.copy_from_host(pshard_.get() + a.poff, params, static_cast<size_t>(n) * sizeof(float));
    params += n;
    in(*a.adamw);
  }
  refresh_act_shard();
}

int64_t ZeroOptimizer::adam_steps() const {
  if (stage_ != 3) return adamw_->steps();
  int64_t s = 0;  // padding pieces never step
  for (const Unit& a : units_) s = std::max(s, a.adamw->steps());
  return s;
}

void ZeroOptimizer::set_adam_steps(int64_t s) {
  if (stage_ != 3) return adamw_->set_steps(s);
  for (Unit& a : units_) a.adamw->set_steps(s);
}

void ZeroOptimizer::zero_grads() {
  if (stage_ == 3) {
    finish_reduce();  // a step that did not reach step(): its gradients are dropped
    be_.zero(gshard_.get(), gshard_.bytes());
  } else {
    for (auto& r : unit_reductions_) r->wait();  // a step that did not reach step()
    unit_reductions_.clear();
    be_.zero(grads_.get(), grads_.bytes());
  }
}

// ---- stage 3: the model's view ------------------------------------------------------------

namespace {
constexpr int kReducing = -2;  // Slot::unit of the slot whose reduce-scatter is under way
}  // namespace

ZeroOptimizer::Slot* ZeroOptimizer::find_slot(int u, bool grad, bool act) {
  for (Slot& s : slots_)
    if (s.unit == u && s.grad == grad && s.act == act) return &s;
  return nullptr;
}

ZeroOptimizer::Slot& ZeroOptimizer::take_slot(int u, bool grad, bool act) {
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

void ZeroOptimizer::refresh_act_shard() {
  if (pshard_act_.size() == 0) return;
  be_.cast(pshard_act_.get(), be_.act_dtype(), pshard_.get(), DType::f32,
           static_cast<int64_t>(pshard_.size()));
}

ZeroOptimizer::Slot& ZeroOptimizer::start_gather(int u, bool act) {
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

void ZeroOptimizer::complete_gather(Slot& s) {
  if (!s.gather) return;
  s.gather->wait();
  s.gather.reset();
}

const act_t* ZeroOptimizer::unit_act_params(int u) {
  if (pshard_act_.size() == 0) return nullptr;
  Slot* s = find_slot(u, false, true);
  if (s == nullptr) s = &start_gather(u, true);  // not prefetched: gathered now
  complete_gather(*s);
  return s->buf.get();
}

void ZeroOptimizer::prefetch(int u) {
  const bool act = pshard_act_.size() != 0;
  if (find_slot(u, false, act) == nullptr) start_gather(u, act);
}

const float* ZeroOptimizer::unit_params(int u) {
  Slot* s = find_slot(u, false);
  if (s == nullptr) s = &start_gather(u, false);
  complete_gather(*s);
  return s->buf.get();
}

float* ZeroOptimizer::unit_grads(int u) {
  if (Slot* s = find_slot(u, true)) return s->buf.get();
  const Unit& a = units_[static_cast<size_t>(u)];
  float* g = take_slot(u, true).buf.get();
  be_.zero(g, static_cast<size_t>(a.padded) * sizeof(float));
  return g;
}

void ZeroOptimizer::unit_done(int u, bool backward) {
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

void ZeroOptimizer::finish_reduce() {
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

double ZeroOptimizer::tp_reduce(float* g, int64_t first, int64_t last, PhaseTimes* timers) {
  double excluded = 0;
  if (replicated_.empty()) return excluded;
  ScopedPhase timed(timers, Phase::tp_comm);
  for (const TpReplicated& r : replicated_) {
    const int64_t lo = std::max(r.begin, first), hi = std::min(r.end, last);
    if (lo >= hi) continue;
    float* x = g + (lo - first);
    peers_.tp_blocks->for_backend(CommPurpose::grad_reduce)
        .block(r.replicas)
        .all_reduce(x, x, static_cast<size_t>(hi - lo), DType::f32, ReduceOp::sum);
    if (r.replica != 0) excluded += be_.sum_squares(x, hi - lo);
  }
  return excluded;
}

void ZeroOptimizer::tp_sum(double* sumsq) {
  if (peers_.tp > 1) peers_.tp_blocks->block(peers_.tp).all_reduce(sumsq, sumsq, 1, DType::f64, ReduceOp::sum);
}

double ZeroOptimizer::step3(const OptimSection& o, double lr, PhaseTimes* timers) {
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
  tp_sum(&sumsq);
  if (peers_.stages) peers_.stages->all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  timed.emplace(timers, Phase::optimizer);
  const double scale = clip_scale(sumsq, o.grad_clip);
  const double norm = std::sqrt(sumsq);
  if (!std::isfinite(scale)) return std::isfinite(norm) ? std::nan("") : norm;
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

double ZeroOptimizer::step(const OptimSection& o, double lr, PhaseTimes* timers) {
  if (stage_ == 3) return step3(o, lr, timers);
  const CommSet& bc = groups_.for_backend();
  Comm& world = *bc.world;
  float* g = grads_.get();
  const size_t B = static_cast<size_t>(block_);
  float* shard_g = g + begin_;
  double sumsq = 0;
  std::optional<ScopedPhase> timed(std::in_place, timers, Phase::grad_reduce);
  // A tied embedding's copies (first and last pipeline stage), summed before the
  // data-parallel reduction: the sum is the same either way, and here both copies are
  // whole on every rank.
  const int64_t embed = param_unit_end(table_, 0);
  if (peers_.tied) peers_.tied->all_reduce(g, g, static_cast<size_t>(embed), DType::f32, ReduceOp::sum);
  if (stage_ <= 1) {
    // Either every unit's all-reduce was started during the last micro-batch (padding
    // beyond the units is zero on every rank) or none was (one rank, or no micro-batch).
    const size_t started = unit_reductions_.size();
    FLEXSP_ASSERT(started == 0 || started == static_cast<size_t>(param_units(table_)));
    for (auto& r : unit_reductions_) r->wait();
    unit_reductions_.clear();
    if (started == 0)
      world.all_reduce(g, g, static_cast<size_t>(padded_), DType::f32, ReduceOp::sum);
    sumsq = -tp_reduce(g, 0, table_.total, timers);
    sumsq += be_.sum_squares(g, table_.total);
    if (peers_.skip_embedding) sumsq -= be_.sum_squares(g, embed);
  } else {
    // Reduce-scatter into this rank's block (in place: the block's own slot of g).
    Comm& sc = *shard_comm_;
    const size_t my = static_cast<size_t>(sc.rank()) * B;
    sc.reduce_scatter(g, scratch_.get(), B, DType::f32, ReduceOp::sum);
    be_.copy(g + my, scratch_.get(), B * sizeof(float));
    if (&sc != &world) bc.cross_node->all_reduce(g + my, g + my, B, DType::f32, ReduceOp::sum);
    sumsq = -tp_reduce(shard_g, begin_, end_, timers);
    sumsq += be_.sum_squares(shard_g, end_ - begin_);
    if (peers_.skip_embedding && begin_ < embed)
      sumsq -= be_.sum_squares(shard_g, std::min(end_, embed) - begin_);
    shard_host_->all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  }
  tp_sum(&sumsq);
  if (peers_.stages) peers_.stages->all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  timed.emplace(timers, Phase::optimizer);
  const double scale = clip_scale(sumsq, o.grad_clip);
  const double norm = std::sqrt(sumsq);
  if (!std::isfinite(scale)) return std::isfinite(norm) ? std::nan("") : norm;
  adamw_->step(params_.get() + begin_, shard_g, o, lr, scale);
  if (stage_ >= 1) {
    // Every rank contributes its updated block; padding blocks are zeros.
    Comm& sc = *shard_comm_;
    be_.copy(scratch_.get(), params_.get() + static_cast<size_t>(sc.rank()) * B, B * sizeof(float));
    sc.all_gather(scratch_.get(), params_.get(), B, DType::f32);
  }
  return norm;
}

}  // namespace flexsp
