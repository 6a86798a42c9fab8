#include "lib/runtime/micro_batch.h"

#include "lib/util/error.h"

namespace flexsp {

int64_t count_predictions(const std::vector<SeqRef>& seqs) {
  int64_t n = 0;
  for (const SeqRef& s : seqs) n += s.length - 1;
  return n;
}

MicroBatch HostMicroBatch::view() const {
  MicroBatch mb;
  mb.tokens = static_cast<int64_t>(ids.size());
  mb.ids = ids.data();
  mb.positions = positions.data();
  mb.targets = targets.data();
  mb.nseq = static_cast<int>(cu_seqlens.size()) - 1;
  mb.cu_seqlens = cu_seqlens.data();
  return mb;
}

void load_micro_batch(const TokenDataset& ds, const std::vector<SeqRef>& seqs, int vocab,
                      HostMicroBatch& out) {
  int64_t total = 0;
  for (const SeqRef& s : seqs) total += s.length;
  FLEXSP_CHECK(total < (int64_t{1} << 31), "micro-batch of {} tokens is too large", total);
  out.ids.resize(total);
  out.positions.resize(total);
  out.targets.resize(total);
  out.cu_seqlens.assign(1, 0);
  int64_t at = 0;
  for (const SeqRef& s : seqs) {
    ds.read(s.doc, s.start, s.length, out.ids.data() + at);
    at += s.length;
    out.cu_seqlens.push_back(static_cast<int32_t>(at));
  }
  for (int64_t t = 0; t < total; ++t)
    FLEXSP_CHECK(out.ids[t] >= 0 && out.ids[t] < vocab,
                 "dataset token {} is outside the model's vocabulary of {}", out.ids[t], vocab);
  const int nseq = static_cast<int>(seqs.size());
  packed_positions(out.cu_seqlens.data(), nseq, out.positions.data());
  packed_next_token_targets(out.ids.data(), out.cu_seqlens.data(), nseq, out.targets.data());
}

void pad_micro_batch(HostMicroBatch& mb, int64_t multiple) {
  const int64_t T = static_cast<int64_t>(mb.ids.size());
  const int64_t pad = (multiple - T % multiple) % multiple;
  if (pad == 0) return;
  for (int64_t i = 0; i < pad; ++i) {
    mb.ids.push_back(0);
    mb.positions.push_back(static_cast<int32_t>(i));
    mb.targets.push_back(-1);
  }
  mb.cu_seqlens.push_back(static_cast<int32_t>(T + pad));
}

}  // namespace flexsp
