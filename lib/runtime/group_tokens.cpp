#include "lib/runtime/group_tokens.h"

#include "lib/runtime/ring_attention.h"
#include "lib/runtime/ulysses.h"

namespace flexsp {

MicroBatch MemberTokens::view() const {
  MicroBatch mb;
  mb.tokens = static_cast<int64_t>(ids.size());
  mb.ids = ids.data();
  mb.positions = positions.data();
  mb.targets = targets.data();
  return mb;
}

void load_group(const TokenDataset& ds, const std::vector<SeqRef>& batch, const PlanGroup& g,
                int vocab, std::vector<SeqRef>& seqs, HostMicroBatch& out) {
  seqs.clear();
  for (int32_t i : g.seqs) seqs.push_back(batch[static_cast<size_t>(i)]);
  load_micro_batch(ds, seqs, vocab, out);
}

void load_group_stream(const TokenDataset& ds, const std::vector<SeqRef>& batch, const PlanGroup& g,
                       int vocab, int tp, const CpSplit& cp, std::vector<SeqRef>& seqs,
                       HostMicroBatch& out) {
  load_group(ds, batch, g, vocab, seqs, out);
  if (tp > 1 && cp.r == 1) pad_micro_batch(out, static_cast<int64_t>(g.size) * tp);
}

std::vector<int64_t> ulysses_share(const HostMicroBatch& stream, int d, int j, MemberTokens& out) {
  std::vector<int64_t> off = shard_offsets(static_cast<int64_t>(stream.ids.size()), d);
  const int64_t lo = off[static_cast<size_t>(j)], hi = off[static_cast<size_t>(j) + 1];
  out.ids.assign(stream.ids.begin() + lo, stream.ids.begin() + hi);
  out.positions.assign(stream.positions.begin() + lo, stream.positions.begin() + hi);
  out.targets.assign(stream.targets.begin() + lo, stream.targets.begin() + hi);
  return off;
}

RingShare ring_share(const HostMicroBatch& stream, const CpSplit& cp, int tp, int j,
                     MemberTokens& out) {
  RingShare s;
  s.layout = zigzag_layout(stream.cu_seqlens.data(), static_cast<int>(stream.cu_seqlens.size()) - 1,
                           cp.r);
  s.padded = cp_padded_tokens(s.layout, cp.u * tp);
  cp_local_tokens(stream.ids.data(), stream.positions.data(), stream.targets.data(), s.layout,
                  s.padded, cp.u, j, out.ids, out.positions, out.targets);
  return s;
}

}  // namespace flexsp
