// The readers of `flexsp pack` (inside io/pack): each input kind has one reader that turns
// a file -- or, for JSON lines, a byte range of one -- into documents and hands their
// tokens to a sink. The sink is the dataset writer (one process, and rank 0 in parallel)
// or a rank's part file (io/pack/pack.cpp), so the same reader code produces the same
// documents in both. The writer checks ids against the vocabulary, so a reader only needs
// its own checks where it can name a better place (a JSON line, a .npy index).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "io/pack/pack.h"

namespace flexsp {

class Tokenizer;

// Where a reader's tokens go: append() any number of times, then end_document().
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void append(const int32_t* ids, int64_t n) = 0;
  virtual void end_document() = 0;
};

// One unit of work: a whole file, or bytes [begin, end) of a JSON lines file (end = -1:
// to its end). A range starts at byte 0 or right after a '\n' and ends right after one
// (or at the end of the file), so it holds whole lines.
enum class InputKind { text, jsonl, npy };
struct PackItem {
  std::string path;
  InputKind kind = InputKind::text;
  int64_t begin = 0, end = -1;
};

InputKind input_kind(const std::string& path, bool all_jsonl);

// Shared state of one pack: the tokenizer, the sink, the running counts.
struct Packer {
  const Tokenizer& tok;
  TokenSink& out;
  PackStats& stats;
  int32_t eos;
  int32_t bos;           // prepended to every document; -1: none
  bool started = false;  // the current document has tokens (and its BOS)

  // Reads one item; stats.files counts the items that start a file.
  void item(const PackItem& it);

 private:
  void put(const int32_t* ids, int64_t n);
  void finish(int64_t n);
  void text_file(const std::string& path);
  void jsonl_range(const std::string& path, int64_t begin, int64_t end);
  // where() names the line ("path:lineno") for a message.
  void json_line(const std::function<std::string()>& where, std::string& line);
  void npy_file(const std::string& path);
};

}  // namespace flexsp
