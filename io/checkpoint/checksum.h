// The checkpoint checksum (docs/checkpoints.md): the sum, mod 2^64, over a tensor's
// elements of splitmix64(element index * 0x9e3779b97f4a7c15 + float32 bits). Any cut of a
// tensor into pieces sums to the same value, so every rank hashes the share it writes or
// reads and one all-reduce gives the tensor's checksum on any layout.
//
// It is computed off the write's critical path (a thread beside the writer, io/checkpoint/
// writer.cpp) and must keep up with a disk: the loop is compiled twice, for AVX-512
// (64-bit lane multiplies: ~6 GB/s per core) and for the baseline, and the CPU picks.
#pragma once

#include <cstdint>

#include "lib/model/params.h"

namespace flexsp {

// Checksum of n float32 elements that are elements [first, first + n) of a tensor.
uint64_t checksum_f32(const float* data, int64_t first, int64_t n);

// The checksum terms of block elements [a, b) of v (valid rows, data[0] is element a),
// indexed in the full tensor.
uint64_t block_checksum(const ParamView& v, const float* data, int64_t a, int64_t b);

}  // namespace flexsp
