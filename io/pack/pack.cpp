// Packing (see pack.h). Each input kind has one reader that turns a file into documents
// and hands them to the TokenWriter; the writer checks ids against the vocabulary, so a
// reader only needs its own checks where it can name a better place (a JSON line).
#include "io/pack/pack.h"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>

#include "io/dataset/token_dataset.h"
#include "io/tokenizer/tokenizer.h"
#include "lib/util/error.h"

namespace fs = std::filesystem;

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

// Shared state of one pack() call.
struct Packer {
  const Tokenizer& tok;
  TokenWriter& out;
  PackStats& stats;
  int32_t eos;
  int32_t bos;           // prepended to every document; -1: none
  bool started = false;  // the current document has tokens (and its BOS)

  // Appends n tokens of the current document; BOS goes before its first one, so an empty
  // document stays empty (and skipped).
  void put(const int32_t* ids, int64_t n) {
    if (n == 0) return;
    if (!started && bos >= 0) out.append(&bos, 1);
    started = true;
    out.append(ids, n);
  }

  // Ends a document of n tokens already put (n == 0: nothing was put).
  void finish(int64_t n) {
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
  void text_file(const std::string& path) {
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
  void jsonl_file(const std::string& path) {
    FilePtr f = open_input(path);
    std::string line;
    std::vector<char> block(kBlock);
    int64_t lineno = 0;
    bool eof = false;
    while (!eof) {
      size_t got = read_some(f.get(), block.data(), block.size(), path);
      stats.bytes_read += static_cast<int64_t>(got);
      eof = got < block.size();
      size_t at = 0;
      while (at < got) {
        const char* nl = static_cast<const char*>(std::memchr(block.data() + at, '\n', got - at));
        size_t end = nl ? static_cast<size_t>(nl - block.data()) : got;
        line.append(block.data() + at, end - at);
        at = end + 1;
        if (nl) {
          json_line(path, ++lineno, line);
          line.clear();
        }
      }
    }
    if (!line.empty()) json_line(path, ++lineno, line);  // last line without '\n'
  }

  void json_line(const std::string& path, int64_t lineno, std::string& line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::string why = e.what();
      size_t cut = why.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
      if (cut != std::string::npos) why = why.substr(cut + 2);
      size_t l1 = why.find("at line 1, ");  // the parser saw one line; ours is lineno
      if (l1 != std::string::npos) why.erase(l1 + 3, 8);
      fail(fmt::format("{}:{}: malformed JSON: {}", path, lineno, why));
    }
    FLEXSP_CHECK(j.is_object() && (j.contains("text") != j.contains("tokens")),
                 "{}:{}: expected an object with \"text\" or \"tokens\" (one of them)", path,
                 lineno);
    if (j.contains("text")) {
      FLEXSP_CHECK(j["text"].is_string(), "{}:{}: \"text\" must be a string", path, lineno);
      std::vector<int32_t> ids = tok.encode(j["text"].get_ref<const std::string&>());
      put(ids.data(), static_cast<int64_t>(ids.size()));
      finish(static_cast<int64_t>(ids.size()));
      return;
    }
    const nlohmann::json& arr = j["tokens"];
    FLEXSP_CHECK(arr.is_array(), "{}:{}: \"tokens\" must be an array of token ids", path, lineno);
    std::vector<int32_t> ids;
    ids.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
      const nlohmann::json& v = arr[i];
      FLEXSP_CHECK(v.is_number_integer(), "{}:{}: tokens[{}] = {} is not an integer", path, lineno,
                   i, v.dump());
      int64_t id = v.get<int64_t>();
      FLEXSP_CHECK(id >= 0 && id < tok.vocab_size(),
                   "{}:{}: tokens[{}] = {} is outside [0, vocab_size = {}) of tokenizer {}", path,
                   lineno, i, id, tok.vocab_size(), tok.name());
      ids.push_back(static_cast<int32_t>(id));
    }
    put(ids.data(), static_cast<int64_t>(ids.size()));
    finish(static_cast<int64_t>(ids.size()));
  }

  // A 1-D little-endian integer .npy array of token ids (numpy format 1.0-3.0) is one
  // document; read in blocks.
  void npy_file(const std::string& path) {
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
};

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  bool r = fs::equivalent(a, b, ec);
  return !ec && r;
}

}  // namespace

std::vector<std::string> list_pack_inputs(const std::vector<std::string>& inputs,
                                          const std::string& glob) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(in, ec);
    FLEXSP_CHECK(fs::exists(st), "{}: no such file or directory", in);
    if (!fs::is_directory(st)) {
      files.push_back(in);  // named explicitly: taken whatever its name
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(in, fs::directory_options::none, ec), end;
    FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
    for (; it != end; it.increment(ec)) {
      FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;  // follows symlinks; skips dangling ones
      std::string name = it->path().filename().string();
      if (!glob.empty() && ::fnmatch(glob.c_str(), name.c_str(), 0) != 0) continue;
      found.push_back(it->path().string());
    }
    FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

PackStats pack(const PackOptions& opts, const Tokenizer& tok) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  FLEXSP_CHECK(!opts.out.empty(), "pack: no output file (--out)");
  FLEXSP_CHECK(!opts.inputs.empty(), "pack: no input files or directories given");
  std::error_code ec;
  if (fs::exists(opts.out, ec)) {
    FLEXSP_CHECK(!fs::is_directory(opts.out, ec), "{}: is a directory (--out needs a file name)",
                 opts.out);
    FLEXSP_CHECK(opts.force, "{}: already exists (use --force to overwrite)", opts.out);
  }
  std::vector<std::string> files = list_pack_inputs(opts.inputs, opts.glob);
  // With --force the old output may sit inside an input directory; never pack it.
  files.erase(std::remove_if(files.begin(), files.end(),
                             [&](const std::string& p) { return same_file(p, opts.out); }),
              files.end());
  FLEXSP_CHECK(!files.empty(), "pack: no input files in {}{}", fmt::join(opts.inputs, ", "),
               opts.glob.empty() ? "" : fmt::format(" match '{}'", opts.glob));

  TokenWriterOptions wo;
  wo.vocab_size = tok.vocab_size();
  wo.eos_id = tok.eos_id();
  wo.tokenizer = tok.name();
  wo.tokenizer_sha256 = tok.sha256();
  if (opts.bos) {
    FLEXSP_CHECK(tok.bos_id() >= 0, "pack: --bos: tokenizer {} has no BOS id", tok.name());
    wo.bos_id = tok.bos_id();
  }
  wo.compression = opts.compression;
  wo.chunk_tokens = opts.chunk_tokens != 0 ? opts.chunk_tokens
                    : opts.compression > 0 ? int64_t(1) << 16
                                           : int64_t(1) << 20;
  TokenWriter writer(opts.out, wo);

  PackStats stats;
  Packer p{tok, writer, stats, static_cast<int32_t>(tok.eos_id()), opts.bos ? tok.bos_id() : -1};
  auto last = t0;
  for (const std::string& path : files) {
    if (opts.jsonl || ends_with(path, ".jsonl"))
      p.jsonl_file(path);
    else if (ends_with(path, ".npy"))
      p.npy_file(path);
    else
      p.text_file(path);
    ++stats.files;
    auto now = clock::now();
    if (opts.progress &&
        std::chrono::duration<double>(now - last).count() >= opts.progress_seconds) {
      stats.seconds = std::chrono::duration<double>(now - t0).count();
      opts.progress(stats);
      last = now;
    }
  }
  FLEXSP_CHECK(stats.documents > 0, "pack: no documents in {} ({} input files, all empty)",
               fmt::join(opts.inputs, ", "), stats.files);
  writer.close();
  stats.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return stats;
}

}  // namespace flexsp
