// The readers of pack (see packer.h). Files are read in blocks of 1 MB; memory is bounded
// by one document (for a context-free tokenizer such as `bytes`, by a block).
#include "io/pack/packer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/tokenizer/tokenizer.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr size_t kBlock = size_t(1) << 20;  // bytes per read for streamed inputs

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

FilePtr open_input(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  FLEXSP_CHECK(f != nullptr, "{}: cannot open ({})", path, std::strerror(errno));
  return FilePtr(f, std::fclose);
}

size_t read_some(std::FILE* f, void* buf, size_t n, const std::string& path) {
  size_t got = std::fread(buf, 1, n, f);
  FLEXSP_CHECK(got == n || !std::ferror(f), "{}: read error ({})", path, std::strerror(errno));
  return got;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Lines before byte `end` of a file: the number of the first line of a range starting
// there is this + 1. Read only when a message needs it.
int64_t lines_before(const std::string& path, int64_t end) {
  FilePtr f = open_input(path);
  std::vector<char> block(kBlock);
  int64_t lines = 0;
  for (int64_t at = 0; at < end;) {
    const size_t got = read_some(f.get(), block.data(), static_cast<size_t>(std::min<int64_t>(end - at, kBlock)), path);
    if (got == 0) break;
    lines += std::count(block.data(), block.data() + got, '\n');
    at += static_cast<int64_t>(got);
  }
  return lines;
}

}  // namespace

InputKind input_kind(const std::string& path, bool all_jsonl) {
  if (all_jsonl || ends_with(path, ".jsonl")) return InputKind::jsonl;
  if (ends_with(path, ".npy")) return InputKind::npy;
  return InputKind::text;
}

void Packer::item(const PackItem& it) {
  if (it.begin == 0) ++stats.files;
  switch (it.kind) {
    case InputKind::jsonl: return jsonl_range(it.path, it.begin, it.end);
    case InputKind::npy: return npy_file(it.path);
    case InputKind::text: return text_file(it.path);
  }
}

// Appends n tokens of the current document; BOS goes before its first one, so an empty
// document stays empty (and skipped).
void Packer::put(const int32_t* ids, int64_t n) {
  if (n == 0) return;
  if (!started && bos >= 0) out.append(&bos, 1);
  started = true;
  out.append(ids, n);
}

// Ends a document of n tokens already put (n == 0: nothing was put).
void Packer::finish(int64_t n) {
  started = false;
  if (n == 0) {
    ++stats.skipped;
    return;
  }
  out.append(&eos, 1);
  out.end_document();
  ++stats.documents;
  stats.tokens += n + 1 + (bos >= 0);
}

// A text file is one document. A context-free tokenizer encodes it block by block
// (bounded memory even for one huge file); others need the whole text at once.
void Packer::text_file(const std::string& path) {
  FilePtr f = open_input(path);
  std::string text;
  int64_t n = 0;
  std::vector<char> block(kBlock);
  for (;;) {
    size_t got = read_some(f.get(), block.data(), block.size(), path);
    stats.bytes_read += static_cast<int64_t>(got);
    if (tok.context_free()) {
      std::vector<int32_t> ids = tok.encode(std::string_view(block.data(), got));
      put(ids.data(), static_cast<int64_t>(ids.size()));
      n += static_cast<int64_t>(ids.size());
    } else {
      text.append(block.data(), got);
    }
    if (got < block.size()) break;
  }
  if (!tok.context_free()) {
    std::vector<int32_t> ids = tok.encode(text);
    put(ids.data(), static_cast<int64_t>(ids.size()));
    n = static_cast<int64_t>(ids.size());
  }
  finish(n);
}

// One document per line: {"text": "..."} or {"tokens": [ids]}; blank lines are ignored.
// Lines are numbered from the range's start; where it is not the file's, the lines before
// it are counted only for a message.
void Packer::jsonl_range(const std::string& path, int64_t begin, int64_t end) {
  FilePtr f = open_input(path);
  FLEXSP_CHECK(std::fseek(f.get(), static_cast<long>(begin), SEEK_SET) == 0, "{}: cannot seek to byte {}", path,
               begin);
  int64_t base = begin == 0 ? 0 : -1;  // lines before the range; -1: not counted yet
  int64_t lineno = 0;                  // within the range
  const std::function<std::string()> where = [&] {
    if (base < 0) base = lines_before(path, begin);
    return fmt::format("{}:{}", path, base + lineno);
  };
  std::string line;
  std::vector<char> block(kBlock);
  int64_t left = end < 0 ? INT64_MAX : end - begin;
  bool eof = false;
  while (!eof && left > 0) {
    size_t got = read_some(f.get(), block.data(), static_cast<size_t>(std::min<int64_t>(left, kBlock)), path);
    stats.bytes_read += static_cast<int64_t>(got);
    left -= static_cast<int64_t>(got);
    eof = got == 0 || (end < 0 && got < block.size());
    size_t at = 0;
    while (at < got) {
      const char* nl = static_cast<const char*>(std::memchr(block.data() + at, '\n', got - at));
      size_t stop = nl ? static_cast<size_t>(nl - block.data()) : got;
      line.append(block.data() + at, stop - at);
      at = stop + 1;
      if (nl) {
        ++lineno;
        json_line(where, line);
        line.clear();
      }
    }
  }
  if (!line.empty()) {  // the last line, without '\n'
    ++lineno;
    json_line(where, line);
  }
}

void Packer::json_line(const std::function<std::string()>& where, std::string& line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.find_first_not_of(" \t") == std::string::npos) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    size_t cut = why.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
    if (cut != std::string::npos) why = why.substr(cut + 2);
    size_t l1 = why.find("at line 1, ");  // the parser saw one line; ours is in `where`
    if (l1 != std::string::npos) why.erase(l1 + 3, 8);
    fail(fmt::format("{}: malformed JSON: {}", where(), why));
  }
  FLEXSP_CHECK(j.is_object() && (j.contains("text") != j.contains("tokens")),
               "{}: expected an object with \"text\" or \"tokens\" (one of them)", where());
  if (j.contains("text")) {
    FLEXSP_CHECK(j["text"].is_string(), "{}: \"text\" must be a string", where());
    std::vector<int32_t> ids = tok.encode(j["text"].get_ref<const std::string&>());
    put(ids.data(), static_cast<int64_t>(ids.size()));
    finish(static_cast<int64_t>(ids.size()));
    return;
  }
  const nlohmann::json& arr = j["tokens"];
  FLEXSP_CHECK(arr.is_array(), "{}: \"tokens\" must be an array of token ids", where());
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const nlohmann::json& v = arr[i];
    FLEXSP_CHECK(v.is_number_integer(), "{}: tokens[{}] = {} is not an integer", where(), i, v.dump());
    int64_t id = v.get<int64_t>();
    FLEXSP_CHECK(id >= 0 && id < tok.vocab_size(),
                 "{}: tokens[{}] = {} is outside [0, vocab_size = {}) of tokenizer {}", where(), i, id,
                 tok.vocab_size(), tok.name());
    ids.push_back(static_cast<int32_t>(id));
  }
  put(ids.data(), static_cast<int64_t>(ids.size()));
  finish(static_cast<int64_t>(ids.size()));
}

// A 1-D little-endian integer .npy array of token ids (numpy format 1.0-3.0) is one
// document; read in blocks.
void Packer::npy_file(const std::string& path) {
  FilePtr f = open_input(path);
  unsigned char head[10];
  FLEXSP_CHECK(read_some(f.get(), head, 8, path) == 8 && std::memcmp(head, "\x93NUMPY", 6) == 0,
               "{}: not a .npy file (bad magic)", path);
  int major = head[6];
  FLEXSP_CHECK(major >= 1 && major <= 3, "{}: unsupported .npy version {}", path, major);
  size_t len_bytes = major == 1 ? 2 : 4;
  FLEXSP_CHECK(read_some(f.get(), head, len_bytes, path) == len_bytes,
               "{}: truncated .npy header", path);
  size_t hlen = head[0] | (size_t(head[1]) << 8);
  if (len_bytes == 4) hlen |= (size_t(head[2]) << 16) | (size_t(head[3]) << 24);
  FLEXSP_CHECK(hlen < (size_t(1) << 20), "{}: .npy header too long", path);
  std::string h(hlen, '\0');
  FLEXSP_CHECK(read_some(f.get(), h.data(), hlen, path) == hlen, "{}: truncated .npy header",
               path);
  stats.bytes_read += static_cast<int64_t>(8 + len_bytes + hlen);

  // The header is a Python dict literal: {'descr': '<u2', 'shape': (n,), ...}
  auto field = [&](const char* key) {
    size_t k = h.find(fmt::format("'{}':", key));
    FLEXSP_CHECK(k != std::string::npos, "{}: .npy header has no '{}'", path, key);
    return h.substr(k + std::strlen(key) + 3);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  FLEXSP_CHECK(q1 != std::string::npos && q2 != std::string::npos, "{}: bad .npy descr", path);
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  std::string shape = field("shape");
  shape = shape.substr(0, shape.find(')'));
  int64_t count = -1;
  int dims = 0;
  for (size_t i = shape.find('('); i != std::string::npos && i < shape.size();) {
    size_t d = shape.find_first_of("0123456789", i);
    if (d == std::string::npos) break;
    size_t e = shape.find_first_not_of("0123456789", d);
    count = std::stoll(shape.substr(d, e - d));
    ++dims;
    i = e;
  }
  FLEXSP_CHECK(dims == 1, "{}: expected a 1-D array of token ids (shape {}))", path, shape);
  FLEXSP_CHECK(descr.size() >= 3 && descr[0] != '>' && (descr[1] == 'i' || descr[1] == 'u') &&
                   (descr.substr(2) == "1" || descr.substr(2) == "2" || descr.substr(2) == "4" ||
                    descr.substr(2) == "8"),
               "{}: dtype '{}' is not a little-endian integer type", path, descr);
  const bool is_signed = descr[1] == 'i';
  const size_t width = static_cast<size_t>(descr[2] - '0');

  std::vector<unsigned char> raw(kBlock * width);
  std::vector<int32_t> ids(kBlock);
  for (int64_t done = 0; done < count;) {
    size_t n = static_cast<size_t>(std::min<int64_t>(count - done, static_cast<int64_t>(kBlock)));
    size_t got = read_some(f.get(), raw.data(), n * width, path);
    FLEXSP_CHECK(got == n * width, "{}: truncated (shape says {} elements, file has {})", path,
                 count, done + static_cast<int64_t>(got / width));
    stats.bytes_read += static_cast<int64_t>(got);
    for (size_t i = 0; i < n; ++i) {
      const unsigned char* p = raw.data() + i * width;
      uint64_t u = 0;
      for (size_t b = 0; b < width; ++b) u |= uint64_t(p[b]) << (8 * b);
      int64_t v = static_cast<int64_t>(u);
      if (is_signed && width < 8 && (u >> (8 * width - 1)) != 0) v -= int64_t(1) << (8 * width);
      FLEXSP_CHECK(v >= 0 && v < tok.vocab_size(),
                   "{}: token {} at index {} is outside [0, vocab_size = {}) of tokenizer {}",
                   path, v, done + static_cast<int64_t>(i), tok.vocab_size(), tok.name());
      ids[i] = static_cast<int32_t>(v);
    }
    put(ids.data(), static_cast<int64_t>(n));
    done += static_cast<int64_t>(n);
  }
  finish(std::max<int64_t>(count, 0));
}

}  // namespace flexsp
