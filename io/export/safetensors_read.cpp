// safetensors reader (see safetensors_read.h).
#include "io/export/safetensors_read.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "lib/util/dtype.h"
#include "lib/util/error.h"

namespace flexsp {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; this reader copies file bytes to host values");

namespace {

// HF's own limit on the header (the safetensors crate refuses larger ones).
constexpr uint64_t kMaxHeader = 100u << 20;

int dtype_bytes(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}

}  // namespace

int64_t StEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    u = sign;  // signed zero
  } else {     // subnormal half: normalise (every one is a normal float32)
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  FLEXSP_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  size_ = stat_ok ? static_cast<size_t>(st.st_size) : 0;
  if (stat_ok && size_ >= 8) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    map_ = p == MAP_FAILED ? nullptr : static_cast<const unsigned char*>(p);
  }
  const int err = errno;
  ::close(fd);
  FLEXSP_CHECK(stat_ok, "{}: cannot stat: {}", path, std::strerror(err));
  FLEXSP_CHECK(size_ >= 8, "{}: truncated: {} bytes, not even the 8-byte header length", path, size_);
  FLEXSP_CHECK(map_ != nullptr, "{}: cannot map: {}", path, std::strerror(err));
  // From here on the destructor does not run if we throw: unmap on the way out.
  try {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(map_[i]) << (8 * i);
    FLEXSP_CHECK(n <= kMaxHeader, "{}: header length {} is implausible (not a safetensors file?)", path, n);
    FLEXSP_CHECK(8 + n <= size_, "{}: truncated: the header needs {} bytes, the file has {}", path, 8 + n,
                 size_);
    data_at_ = 8 + n;
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(map_ + 8, map_ + 8 + n);
    } catch (const nlohmann::json::exception& e) {
      fail(fmt::format("{}: the header is not valid JSON (not a safetensors file?): {}", path, e.what()));
    }
    FLEXSP_CHECK(h.is_object(), "{}: the header is not a JSON object", path);
    const uint64_t data_bytes = size_ - data_at_;
    for (const auto& [name, v] : h.items()) {
      if (name == "__metadata__") {
        FLEXSP_CHECK(v.is_object(), "{}: __metadata__ is not an object", path);
        for (const auto& [k, s] : v.items())
          if (s.is_string()) metadata_[k] = s.get<std::string>();
        continue;
      }
      auto bad = [&](const std::string& why) { fail(fmt::format("{}: tensor {}: {}", path, name, why)); };
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
        bad("needs dtype, shape and data_offsets");
      StEntry e;
      if (!v["dtype"].is_string()) bad("dtype is not a string");
      e.dtype = v["dtype"].get<std::string>();
      const int eb = dtype_bytes(e.dtype);
      if (eb == 0) bad(fmt::format("dtype {} is not supported (F32, F16 or BF16)", e.dtype));
      if (!v["shape"].is_array()) bad("shape is not an array");
      int64_t numel = 1;
      for (const auto& d : v["shape"]) {
        if (!d.is_number_unsigned()) bad(fmt::format("shape {} is not a list of sizes", v["shape"].dump()));
        const uint64_t x = d.get<uint64_t>();
        if (x > (uint64_t{1} << 40) || (x > 0 && static_cast<uint64_t>(numel) > (uint64_t{1} << 42) / x))
          bad(fmt::format("shape {} is too large", v["shape"].dump()));
        e.shape.push_back(static_cast<int64_t>(x));
        numel *= static_cast<int64_t>(x);
      }
      const auto& o = v["data_offsets"];
      if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
        bad("data_offsets is not [begin, end]");
      e.begin = o[0].get<uint64_t>();
      e.end = o[1].get<uint64_t>();
      if (e.end < e.begin || e.end - e.begin != static_cast<uint64_t>(numel) * eb)
        bad(fmt::format("data_offsets [{}, {}] do not span {} x {} bytes", e.begin, e.end, numel, eb));
      if (e.end > data_bytes)
        bad(fmt::format("truncated: its data ends at byte {} of the data, the file holds {}", e.end,
                        data_bytes));
      tensors_.emplace(name, std::move(e));
    }
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), size_);
    throw;
  }
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), size_(o.size_), data_at_(o.data_at_),
      tensors_(std::move(o.tensors_)), metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), size_);
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  auto it = tensors_.find(name);
  FLEXSP_CHECK(it != tensors_.end(), "{}: no tensor {}", path_, name);
  const StEntry& e = it->second;
  const unsigned char* p = map_ + data_at_ + e.begin;
  const int64_t n = e.numel();
  if (e.dtype == "F32") {
    std::memcpy(out, p, static_cast<size_t>(n) * 4);
    return;
  }
  const bool bf16 = e.dtype == "BF16";
  for (int64_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    out[i] = bf16 ? bf16_to_float(b) : f32_from_f16(b);
  }
}

}  // namespace flexsp
