// cuDNN's fused attention for packed documents (design notes in attention_cudnn.h). Host
// code: the cuDNN frontend's graph API (header-only, C++17) over libcudnn. Without
// FLEXSP_HAVE_CUDNN only the stubs at the end are compiled.
#include "kernels/cuda/attention_cudnn.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention_cudnn_index.h"
#include "kernels/cuda/cuda_check.h"
#include "lib/util/error.h"

#ifdef FLEXSP_HAVE_CUDNN
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace flexsp::cuda {

std::string cudnn_attention_unsupported(const cpu::AttnShape& s, bool bf16) {
  if (!cudnn_attention_built()) return "this build has no cuDNN attention";
  if (!bf16) return "cuDNN attention takes bf16 activations only";
  if (s.head_dim % 8 != 0 || s.head_dim < 8 || s.head_dim > 128)
    return fmt::format("head_dim {} (cuDNN attention: a multiple of 8 up to 128)", s.head_dim);
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    return fmt::format("{} query heads over {} kv heads", s.heads, s.kv_heads);
  if (s.cu_seqlens_k != nullptr || s.causal_offset != nullptr)
    return "keys other than the queries' own rows (ring attention, Seq1F1B chunks)";
  if (s.cu_seqlens_host == nullptr) return "no host copy of cu_seqlens";
  const int64_t tokens = s.nseq > 0 ? s.cu_seqlens_host[s.nseq] : 0;
  if (!cudnn_offsets_fit(tokens, std::max(s.heads, s.kv_heads), s.head_dim))
    return fmt::format("{} tokens: element offsets past int32", tokens);
  return "";
}

#ifdef FLEXSP_HAVE_CUDNN

namespace fe = cudnn_frontend;

#define FLEXSP_CUDNN_CHECK(call)                                                         \
  do {                                                                                   \
    cudnnStatus_t st_ = (call);                                                          \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                     \
      ::flexsp::fail(::fmt::format("cuDNN error {} at {}:{}: {}", int(st_), __FILE__,    \
                                   __LINE__, cudnnGetErrorString(st_)));                 \
  } while (0)

bool cudnn_attention_built() { return true; }

namespace {

// Tensor uids of both graphs (the variant packs name tensors by these).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kLse, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKV,
  kRagQ, kRagK, kRagV, kRagO, kRagLse, kRagDO, kRagDQ, kRagDK, kRagDV
};

struct GraphKey {
  bool backward;
  int64_t batch, max_seqlen, max_tokens;
  int heads, kv_heads, head_dim;
  uint32_t scale_bits;
  bool operator<(const GraphKey& o) const {
    return std::tie(backward, batch, max_seqlen, max_tokens, heads, kv_heads, head_dim,
                    scale_bits) < std::tie(o.backward, o.batch, o.max_seqlen, o.max_tokens,
                                           o.heads, o.kv_heads, o.head_dim, o.scale_bits);
  }
};

struct GraphEntry {
  std::shared_ptr<fe::graph::Graph> graph;  // null when refused
  int64_t workspace = 0;
  std::string refusal;
};

}  // namespace

struct CudnnAttention::Impl {
  static constexpr size_t kCachedLayouts = 8;
  struct Layout {
    std::vector<int32_t> key;  // heads, kv_heads, head_dim, nseq, cu[0..nseq]
    size_t used = 0;
    CudnnBucket bucket;
    CudnnIndex index;  // offsets into dev
    int32_t* dev = nullptr;
    size_t cap = 0;
  };

  cudaStream_t stream;
  TileUploader& up;
  cudnnHandle_t handle = nullptr;
  std::map<GraphKey, GraphEntry> graphs;
  std::vector<Layout> layouts;
  size_t clock = 0, builds = 0;
  double build_s = 0;
  std::string refusal;

  Impl(cudaStream_t st, TileUploader& u) : stream(st), up(u) {
    FLEXSP_CUDNN_CHECK(cudnnCreate(&handle));
    FLEXSP_CUDNN_CHECK(cudnnSetStream(handle, stream));
  }
  ~Impl() {
    for (Layout& l : layouts) up.free(l.dev);
    if (handle != nullptr) cudnnDestroy(handle);
  }

  // The device index arrays of s's layout (uploaded when not among the last few).
  const Layout& layout(const cpu::AttnShape& s) {
    std::vector<int32_t> key{s.heads, s.kv_heads, s.head_dim, s.nseq};
    key.insert(key.end(), s.cu_seqlens_host, s.cu_seqlens_host + s.nseq + 1);
    ++clock;
    Layout* e = nullptr;
    for (Layout& l : layouts) {
      if (l.key == key) {
        l.used = clock;
        return l;
      }
      if (e == nullptr || l.used < e->used) e = &l;
    }
    if (layouts.size() < kCachedLayouts) e = &layouts.emplace_back();
    e->key = std::move(key);
    e->used = clock;
    e->bucket = cudnn_bucket(s.cu_seqlens_host, s.nseq);
    e->index = cudnn_index(s.cu_seqlens_host, s.nseq, e->bucket.batch, s.heads, s.kv_heads,
                           s.head_dim);
    const size_t bytes = e->index.data.size() * sizeof(int32_t);
    if (bytes > e->cap) {
      up.free(e->dev);
      e->cap = std::max(bytes, e->cap * 2);
      e->dev = static_cast<int32_t*>(up.alloc(e->cap));
    }
    up.upload(e->dev, e->index.data.data(), bytes);
    return *e;
  }

  using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;
  // The ragged offsets [batch + 1] of one tensor (int32 elements).
  static Tensor ragged(fe::graph::Graph& g, const char* name, int64_t uid, int64_t b) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(std::string(name) + "_ragged")
                        .set_uid(uid)
                        .set_dim({b + 1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
  }
  // Packed rows [T, h, d] as a ragged [b, h, s, d] tensor (input, or an output's t).
  static void packed(fe::graph::Tensor_attributes& t, const char* name, int64_t uid,
                     const Tensor& rag, int64_t b, int64_t h, int64_t s, int64_t d) {
    t.set_name(name).set_uid(uid).set_dim({b, h, s, d}).set_stride({s * h * d, d, h * d, 1})
        .set_ragged_offset(rag);
  }
  static Tensor packed_input(fe::graph::Graph& g, const char* name, int64_t uid,
                             int64_t rag_uid, int64_t b, int64_t h, int64_t s, int64_t d) {
    Tensor t = g.tensor(fe::graph::Tensor_attributes());
    packed(*t, name, uid, ragged(g, name, rag_uid, b), b, h, s, d);
    return t;
  }

  std::shared_ptr<fe::graph::Graph> make_graph(const GraphKey& k) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t b = k.batch, s = k.max_seqlen, d = k.head_dim, hq = k.heads, hk = k.kv_heads;
    Tensor q = packed_input(*g, "q", kQ, kRagQ, b, hq, s, d);
    Tensor kk = packed_input(*g, "k", kK, kRagK, b, hk, s, d);
    Tensor v = packed_input(*g, "v", kV, kRagV, b, hk, s, d);
    auto seq = [&](const char* name, int64_t uid) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({b, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    auto seq_q = seq("seq_q", kSeqQ), seq_kv = seq("seq_kv", kSeqKV);
    Tensor lse_rag = ragged(*g, "lse", kRagLse, b);
    float scale;
    std::memcpy(&scale, &k.scale_bits, sizeof scale);
    // Both directions: scaled, causal (top-left) inside each sequence, ragged.
    auto common = [&](auto& a) {
      a.set_attn_scale(scale).set_causal_mask(true).set_padding_mask(true).set_seq_len_q(seq_q)
          .set_seq_len_kv(seq_kv).set_max_total_seq_len_q(k.max_tokens)
          .set_max_total_seq_len_kv(k.max_tokens);
    };
    if (!k.backward) {
      Tensor o_rag = ragged(*g, "o", kRagO, b);
      auto opt = fe::graph::SDPA_attributes();
      common(opt.set_name("flexsp_attention_forward").set_generate_stats(true));
      auto [o, lse] = g->sdpa(q, kk, v, opt);
      packed(o->set_output(true), "o", kO, o_rag, b, hq, s, d);
      lse->set_output(true).set_name("lse").set_uid(kLse).set_data_type(fe::DataType_t::FLOAT)
          .set_dim({b, hq, s, 1}).set_stride({s * hq, 1, hq, 1}).set_ragged_offset(lse_rag);
    } else {
      Tensor o = packed_input(*g, "o", kO, kRagO, b, hq, s, d);
      Tensor dout = packed_input(*g, "do", kDO, kRagDO, b, hq, s, d);
      auto lse = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("lse")
                               .set_uid(kLse)
                               .set_dim({b, hq, s, 1})
                               .set_stride({s * hq, 1, hq, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
      lse->set_ragged_offset(lse_rag);

      auto opt = fe::graph::SDPA_backward_attributes();
      common(opt.set_name("flexsp_attention_backward"));
      auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, lse, opt);
      packed(dq->set_output(true), "dq", kDQ, ragged(*g, "dq", kRagDQ, b), b, hq, s, d);
      packed(dk->set_output(true), "dk", kDK, ragged(*g, "dk", kRagDK, b), b, hk, s, d);
      packed(dv->set_output(true), "dv", kDV, ragged(*g, "dv", kRagDV, b), b, hk, s, d);
    }
    return g;
  }

  // The graph of (direction, s's bucket): built on first use, refused ones remembered.
  const GraphEntry& graph(bool backward, const cpu::AttnShape& s, const CudnnBucket& bk) {
    const float scale = static_cast<float>(s.scale);
    GraphKey key{backward, bk.batch, bk.max_seqlen, bk.max_tokens, s.heads, s.kv_heads,
                 s.head_dim, 0};
    std::memcpy(&key.scale_bits, &scale, sizeof scale);
    auto it = graphs.find(key);
    if (it != graphs.end()) return it->second;
    GraphEntry e;
    ++builds;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      auto g = make_graph(key);
      auto step = [&](fe::error_t st, const char* what) {
        if (st.is_good() || !e.refusal.empty()) return;
        e.refusal = fmt::format("{}: {}", what, st.get_message());
      };
      step(g->validate(), "validate");
      if (e.refusal.empty()) step(g->build_operation_graph(handle), "build_operation_graph");
      if (e.refusal.empty()) step(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
      if (e.refusal.empty()) step(g->check_support(handle), "check_support");
      if (e.refusal.empty()) step(g->build_plans(handle), "build_plans");
      if (e.refusal.empty()) step(g->get_workspace_size(e.workspace), "get_workspace_size");
      if (e.refusal.empty()) e.graph = std::move(g);
    } catch (const std::exception& ex) {
      e.refusal = ex.what();
    }
    build_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!e.refusal.empty())
      e.refusal = fmt::format(
          "cuDNN refused the attention {} graph (batch {}, max_seqlen {}, max_tokens {}, heads "
          "{}/{}, head_dim {}): {}", backward ? "backward" : "forward", bk.batch,
          bk.max_seqlen, bk.max_tokens, s.heads, s.kv_heads, s.head_dim, e.refusal);
    return graphs.emplace(key, std::move(e)).first->second;
  }

  void run(const GraphEntry& g, std::unordered_map<int64_t, void*>& pack, Scratch& scratch) {
    void* ws = g.workspace > 0 ? scratch.acquire(static_cast<size_t>(g.workspace)) : nullptr;
    fe::error_t st = g.graph->execute(handle, pack, ws);
    if (ws != nullptr) scratch.release(ws);
    FLEXSP_CHECK(st.is_good(), "cuDNN attention: execute failed: {}", st.get_message());
  }

  void index_pack(const Layout& l, std::unordered_map<int64_t, void*>& pack, bool backward) {
    int32_t* x = l.dev;
    pack[kSeqQ] = pack[kSeqKV] = x + l.index.seqlen;
    pack[kRagQ] = pack[kRagO] = x + l.index.ragged_q;
    pack[kRagK] = pack[kRagV] = x + l.index.ragged_kv;
    pack[kRagLse] = x + l.index.ragged_lse;
    if (backward) {
      pack[kRagDO] = pack[kRagDQ] = x + l.index.ragged_q;
      pack[kRagDK] = pack[kRagDV] = x + l.index.ragged_kv;
    }
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream, TileUploader& up)
    : impl_(std::make_unique<Impl>(stream, up)) {}
CudnnAttention::~CudnnAttention() = default;
const std::string& CudnnAttention::refusal() const { return impl_->refusal; }
size_t CudnnAttention::graph_builds() const { return impl_->builds; }
double CudnnAttention::graph_build_seconds() const { return impl_->build_s; }

// cuDNN reads and writes its tensors 16 bytes at a time: a pointer off that is refused.
static bool aligned16(std::initializer_list<const void*> ptrs, std::string& refusal) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      refusal = "cuDNN attention: a tensor is not 16-byte aligned";
      return false;
    }
  return true;
}

bool CudnnAttention::forward(void* out, float* lse, const void* q, const void* k, const void* v,
                             const cpu::AttnShape& s, Scratch& scratch) {
  FLEXSP_ASSERT(cudnn_attention_unsupported(s, true).empty());
  if (s.nseq <= 0 || s.cu_seqlens_host[s.nseq] == 0) return true;  // no rows
  if (!aligned16({out, lse, q, k, v}, impl_->refusal)) return false;
  const Impl::Layout& l = impl_->layout(s);
  const GraphEntry& g = impl_->graph(false, s, l.bucket);
  if (!g.graph) {
    impl_->refusal = g.refusal;
    return false;
  }
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)},
                                          {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(v)},
                                          {kO, out},
                                          {kLse, lse}};
  impl_->index_pack(l, pack, false);
  impl_->run(g, pack, scratch);
  return true;
}

bool CudnnAttention::backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                              const void* k, const void* v, const void* out, const float* lse,
                              const cpu::AttnShape& s, Scratch& scratch) {
  FLEXSP_ASSERT(cudnn_attention_unsupported(s, true).empty());
  if (s.nseq <= 0 || s.cu_seqlens_host[s.nseq] == 0) return true;
  if (!aligned16({dq, dk, dv, dout, q, k, v, out, lse}, impl_->refusal)) return false;
  const Impl::Layout& l = impl_->layout(s);
  const GraphEntry& g = impl_->graph(true, s, l.bucket);
  if (!g.graph) {
    impl_->refusal = g.refusal;
    return false;
  }
  std::unordered_map<int64_t, void*> pack{
      {kQ, const_cast<void*>(q)},     {kK, const_cast<void*>(k)},
      {kV, const_cast<void*>(v)},     {kO, const_cast<void*>(out)},
      {kDO, const_cast<void*>(dout)}, {kLse, const_cast<float*>(lse)},
      {kDQ, dq},                      {kDK, dk},
      {kDV, dv}};
  impl_->index_pack(l, pack, true);
  impl_->run(g, pack, scratch);
  return true;
}

#else  // no cuDNN frontend in this build

bool cudnn_attention_built() { return false; }

struct CudnnAttention::Impl {
  std::string refusal = "this build has no cuDNN attention";
};
CudnnAttention::CudnnAttention(cudaStream_t, TileUploader&) {
  fail("cuDNN attention: this build has none (configure with the cuDNN frontend's headers: "
       "scripts/gpu/fetch_cudnn_frontend.sh, FLEXSP_CUDNN)");
}
CudnnAttention::~CudnnAttention() = default;
const std::string& CudnnAttention::refusal() const { return impl_->refusal; }
size_t CudnnAttention::graph_builds() const { return 0; }
double CudnnAttention::graph_build_seconds() const { return 0; }
bool CudnnAttention::forward(void*, float*, const void*, const void*, const void*,
                             const cpu::AttnShape&, Scratch&) {
  return false;
}
bool CudnnAttention::backward(void*, void*, void*, const void*, const void*, const void*,
                              const void*, const void*, const float*, const cpu::AttnShape&,
                              Scratch&) {
  return false;
}

#endif

}  // namespace flexsp::cuda
