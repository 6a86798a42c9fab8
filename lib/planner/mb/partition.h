// The two dynamic programs of the planner, on sorted arrays:
//  - bucketing: cut the ascending lengths into at most B contiguous buckets minimizing the
//    padding (every sequence counted at its bucket's longest length), so the MILP works on
//    B bucket counts instead of n sequences;
//  - chunking: cut a descending-length batch into exactly M contiguous micro-batches
//    minimizing the sum of per-chunk costs, each chunk under a token cap.
// Bucketing is O(B k log k) over the k distinct lengths (divide and conquer: its padding
// obeys the quadrangle inequality); chunking O(M n^2) over candidate cut points, callers
// with large n passing fewer candidates (quantiles). Both are exact (tested against brute
// force).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace flexsp {

// sorted: ascending lengths. Returns the end index (exclusive) of each bucket, ascending,
// last = n; at most max_buckets buckets; fewer when there are fewer distinct lengths.
// Cuts are only placed between different lengths.
std::vector<int> bucket_lengths(const std::vector<int64_t>& sorted, int max_buckets);

// Padding of a bucketing (sum over sequences of bucket max - length).
int64_t bucket_padding(const std::vector<int64_t>& sorted, const std::vector<int>& ends);

// Splits [0, n) into exactly m contiguous chunks with ends among `cuts` (ascending, each in
// (0, n], n included), minimizing sum of cost(begin, end); chunks where cost is +inf
// (e.g. over the memory cap) are not allowed. Returns the chunk ends, or {} if no split
// exists.
std::vector<int> chunk_split(int n, int m, const std::vector<int>& cuts,
                             const std::function<double(int, int)>& cost);

}  // namespace flexsp
