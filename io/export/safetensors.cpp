// safetensors writer (see safetensors.h). Tensors are converted and written in chunks, so
// memory does not grow with the model beyond the caller's float32 copy.
#include "io/export/safetensors.h"
#include "io/util/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/util/dtype.h"
#include "lib/util/error.h"

namespace flexsp {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this writer copies host bytes");

const char* st_dtype_name(StDType t) { return t == StDType::bf16 ? "BF16" : "F32"; }
int st_dtype_bytes(StDType t) { return t == StDType::bf16 ? 2 : 4; }

namespace {

int64_t numel(const StTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// The tensors in name order (the order of the header's keys and of the data).
std::vector<const StTensor*> sorted(const std::vector<StTensor>& tensors) {
  std::vector<const StTensor*> v;
  std::set<std::string> seen;
  for (const StTensor& t : tensors) {
    FLEXSP_CHECK(!t.name.empty() && t.name != "__metadata__", "safetensors: invalid tensor name '{}'",
                 t.name);
    FLEXSP_CHECK(seen.insert(t.name).second, "safetensors: duplicate tensor name '{}'", t.name);
    for (int64_t d : t.shape) FLEXSP_CHECK(d >= 0, "safetensors: tensor {} has a negative dimension", t.name);
    v.push_back(&t);
  }
  std::sort(v.begin(), v.end(), [](const StTensor* a, const StTensor* b) { return a->name < b->name; });
  return v;
}

}  // namespace

std::string safetensors_header(const std::vector<StTensor>& tensors, StDType dtype,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  int64_t at = 0;
  for (const StTensor* t : sorted(tensors)) {
    const int64_t bytes = numel(*t) * st_dtype_bytes(dtype);
    h[t->name] = {{"dtype", st_dtype_name(dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

void write_safetensors_file(const std::string& tmp, const std::string& path,
                            const std::vector<StTensor>& tensors, StDType dtype,
                            const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(tensors, dtype, metadata);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  FLEXSP_CHECK(f != nullptr, "{}: cannot write: {}", path, std::strerror(errno));
  bool ok = true;
  auto put = [&](const void* p, size_t n) { ok = ok && std::fwrite(p, 1, n, f) == n; };
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  put(len, 8);
  put(header.data(), header.size());
  std::vector<uint16_t> chunk;
  for (const StTensor* t : sorted(tensors)) {
    const int64_t count = numel(*t);
    if (dtype == StDType::f32) {
      if (count > 0) put(t->data, static_cast<size_t>(count) * 4);
      continue;
    }
    constexpr int64_t kChunk = 1 << 16;
    for (int64_t i = 0; i < count && ok; i += kChunk) {
      const int64_t m = std::min(kChunk, count - i);
      chunk.resize(static_cast<size_t>(m));
      for (int64_t j = 0; j < m; ++j) chunk[static_cast<size_t>(j)] = float_to_bf16(t->data[i + j]);
      put(chunk.data(), static_cast<size_t>(m) * 2);
    }
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail(fmt::format("{}: cannot write: {}", path, why));
  }
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       StDType dtype, const std::map<std::string, std::string>& metadata) {
  const std::string tmp = temp_path(path);
  write_safetensors_file(tmp, path, tensors, dtype, metadata);
  publish_file(tmp, path);
}

}  // namespace flexsp
