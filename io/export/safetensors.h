// A safetensors writer (the HuggingFace tensor file format), written by flexsp itself so
// that export needs no Python package:
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32"|"BF16",
//             "shape": [...], "data_offsets": [begin, end]}, ...}, padded with spaces to a
//             multiple of 8 so that the data starts aligned
//   the data  every tensor's raw little-endian bytes, back to back, no holes; offsets are
//             relative to the end of the header
// Choice: tensors are laid out in name order, the order the JSON object lists them in
// (nlohmann::json sorts keys), so header order and data order agree, as HF's own
// serializer does for one dtype. Input is always float32 (the checkpoint's master
// weights); bf16 is made by lib/util/dtype.h's float_to_bf16 (round-to-nearest-even, NaN
// kept a NaN), the one bf16 rounding of the host code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flexsp {

enum class StDType { f32, bf16 };

// One tensor to write: float32 host data of prod(shape) elements (row-major).
struct StTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// "F32" / "BF16"; bytes per element.
const char* st_dtype_name(StDType t);
int st_dtype_bytes(StDType t);

// The header text (without the 8-byte length), padded to a multiple of 8 bytes. Throws
// Error for an empty or duplicate name, or "__metadata__" used as a tensor name.
std::string safetensors_header(const std::vector<StTensor>& tensors, StDType dtype,
                               const std::map<std::string, std::string>& metadata);

// Writes path via "<path>.tmp.<pid>" and a rename, so an existing file is replaced whole
// or not at all. Throws Error naming the file.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       StDType dtype, const std::map<std::string, std::string>& metadata);
// The file alone, written to `tmp` for a caller that renames it into place itself (with
// other files); errors name `path`. On a write error (a full disk) tmp is removed.
void write_safetensors_file(const std::string& tmp, const std::string& path,
                            const std::vector<StTensor>& tensors, StDType dtype,
                            const std::map<std::string, std::string>& metadata);

}  // namespace flexsp
