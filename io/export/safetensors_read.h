// A safetensors reader (the format: io/export/safetensors.h), for `flexsp import`.
//
// The file is mapped read-only and its header parsed and checked in full before any
// tensor is touched: the header length fits the file, the header is a JSON object, every
// tensor has a known dtype (F32, F16, BF16: what LLaMA checkpoints ship), a shape of
// non-negative dimensions and data_offsets whose span is exactly shape x dtype bytes and
// lies inside the file. A truncated or malformed file is therefore an Error naming the
// file (and the tensor), never a read past the end. Reading converts to float32 exactly
// (every bf16 and fp16 value is a float32 value), element by element through memcpy, so
// the data need not be aligned.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flexsp {

struct StEntry {
  std::string dtype;            // "F32", "F16" or "BF16"
  std::vector<int64_t> shape;   // row-major
  uint64_t begin = 0, end = 0;  // data_offsets: bytes after the header
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and checks path (see above). Throws Error naming the file.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Tensor `name` as float32 into out (numel() elements). Throws Error naming the file
  // and the tensor when it is missing.
  void read_f32(const std::string& name, float* out) const;

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;
  size_t size_ = 0;
  uint64_t data_at_ = 0;  // 8 + header length
  std::map<std::string, StEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// IEEE half -> float32 (exact: subnormals, infinities and NaN included).
float f32_from_f16(uint16_t h);

}  // namespace flexsp
