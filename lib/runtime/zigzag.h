// The zigzag layout of ring attention (docs/parallel.md, "Context parallelism"): how the
// packed stream of an SP group is dealt out over the r positions of a ring.
//
// Causal attention makes late tokens cost more than early ones, so contiguous shards
// would leave the last ring position with most of the work. Instead every document is cut
// into 2r chunks and position p holds chunks p and 2r-1-p of *every* document: one early
// and one late chunk, so each position does the same work per document and attention
// never crosses documents. Chunk sizes differ by at most one token: a document of L
// tokens has L % 2r chunks one token longer than L / 2r, and those extra tokens go round
// the positions in turn across documents (a running counter), so the positions' token
// counts differ by at most one for any mix of lengths -- documents shorter than 2r
// tokens included (their other chunks are empty). No padding is needed.
//
// A position's tokens are laid out as two halves: the early chunks of all documents in
// stream order, then the late chunks. Each half's documents are then contiguous and in
// order, which is what the attention kernels' span layout (AttnShape) needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flexsp {

struct ZigzagLayout {
  int r = 1;
  int ndoc = 0;
  // Chunk c of document s is stream tokens [bounds[s*(2r+1) + c], bounds[s*(2r+1) + c + 1]).
  std::vector<int32_t> bounds;
  std::vector<int64_t> tokens;  // [r] tokens of each position

  int32_t chunk_begin(int s, int c) const { return bounds[static_cast<size_t>(s) * (2 * r + 1) + c]; }
  int32_t chunk_len(int s, int c) const { return chunk_begin(s, c + 1) - chunk_begin(s, c); }
  // Length of document s's early (late) chunk on position p.
  int32_t early_len(int s, int p) const { return chunk_len(s, p); }
  int32_t late_len(int s, int p) const { return chunk_len(s, 2 * r - 1 - p); }
  // Tokens in position p's early half.
  int64_t early_tokens(int p) const;
};

// cu_seqlens [nseq + 1] of the group's stream (documents); r >= 1.
ZigzagLayout zigzag_layout(const int32_t* cu_seqlens, int nseq, int r);

// The stream index of each token of position p, in its local order (early half, late half).
std::vector<int64_t> zigzag_indices(const ZigzagLayout& z, int p);

// The inverse: for stream token t, owner[t] = its position and local[t] its index there.
void zigzag_owners(const ZigzagLayout& z, std::vector<int32_t>& owner,
                   std::vector<int64_t>& local);

}  // namespace flexsp
