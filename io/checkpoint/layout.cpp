// Pieces and file runs of a rank's state (see layout.h).
#include "io/checkpoint/layout.h"

#include <algorithm>

namespace flexsp {

const char* const kCheckpointGroupNames[kCheckpointGroups] = {"model", "optimizer/exp_avg",
                                                              "optimizer/exp_avg_sq"};

std::vector<Piece> pieces_of(const ShardRanges& s, bool cover, int64_t tb, int64_t te) {
  std::vector<Piece> out;
  int64_t at = 0;
  for (const auto& [b, e] : s.ranges) {
    int64_t lo = b, hi = e;
    if (cover) {
      const int64_t len = e - b;
      lo = b + len * s.replica / s.replicas;
      hi = b + len * (s.replica + 1) / s.replicas;
    }
    lo = std::max(lo, tb);
    hi = std::min(hi, te);
    if (lo < hi) out.push_back({lo, hi, at + (lo - b)});
    at += e - b;
  }
  return out;
}

int64_t valid_end(const ParamView& v) { return v.offset + v.valid_rows() * v.cols; }

namespace {

// The runs of block elements [a, b) of v (valid rows) held at element `at` of buffer k,
// v's dataset starting at byte `base`: one run when the block spans whole rows of the
// tensor, else one per row.
void append_runs(const ParamView& v, uint64_t base, int k, int64_t at, int64_t a, int64_t b,
                 std::vector<FileRun>* out) {
  const bool whole_rows = v.cols == v.full_cols;
  for (int64_t e = a; e < b;) {
    const int64_t n = whole_rows ? b - e : std::min(b, (e / v.cols + 1) * v.cols) - e;
    out->push_back({base + 4 * static_cast<uint64_t>(v.full_index(e)), at + (e - a), n, k});
    e += n;
  }
}

}  // namespace

std::vector<FileRun> file_runs(const ParamTable& t, const std::vector<uint64_t>& offsets,
                               const ShardRanges* const shards[kCheckpointGroups], bool cover) {
  const RunPart p = cover ? kRunWritten : kRunHeld;
  const RunPart parts[kCheckpointGroups] = {p, p, p};
  return file_runs(t, offsets, shards, parts);
}

std::vector<FileRun> file_runs(const ParamTable& t, const std::vector<uint64_t>& offsets,
                               const ShardRanges* const shards[kCheckpointGroups],
                               const RunPart parts[kCheckpointGroups]) {
  const size_t n = t.views.size();
  std::vector<FileRun> runs;
  for (int k = 0; k < kCheckpointGroups; ++k)
    for (size_t i = 0; i < n; ++i) {
      const ParamView& v = t.views[i];
      const uint64_t base = offsets[k * n + i];
      if (base == kNoOffset || (parts[k] == kRunWritten && v.tp_replica != 0)) continue;
      for (const Piece& p : pieces_of(*shards[k], parts[k] != kRunHeld, v.offset, valid_end(v)))
        append_runs(v, base, k, p.at, p.begin - v.offset, p.end - v.offset, &runs);
    }
  std::sort(runs.begin(), runs.end(), [](const FileRun& x, const FileRun& y) { return x.file < y.file; });
  std::vector<FileRun> merged;
  for (const FileRun& r : runs) {
    if (!merged.empty()) {
      FileRun& m = merged.back();
      if (m.buf == r.buf && m.file + 4 * static_cast<uint64_t>(m.n) == r.file && m.at + m.n == r.at) {
        m.n += r.n;
        continue;
      }
    }
    merged.push_back(r);
  }
  return merged;
}

uint64_t run_bytes(const std::vector<FileRun>& runs) {
  uint64_t b = 0;
  for (const FileRun& r : runs) b += 4 * static_cast<uint64_t>(r.n);
  return b;
}

}  // namespace flexsp
