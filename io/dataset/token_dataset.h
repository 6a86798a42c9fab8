// Token datasets (docs/datasets.md): HDF5 files holding /tokens (uint16 or int32) and
// /offsets (int64, D+1). A TokenDataset opens one or more such files as one sequence of
// documents. Opening reads the attributes and caches the offsets (8 bytes a document);
// tokens stay on disk and are read by hyperslab when a document is asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flexsp {

class TokenDataset {
 public:
  // Opens the files in order; all must agree on vocab_size, eos_id and tokenizer (by its
  // file's SHA-256 where both files record one, else by name).
  // Throws Error naming the file and what is wrong (missing, not HDF5, missing
  // /tokens or /offsets, bad schema, vocab mismatch). Cheap checks only: attributes,
  // shapes, dtypes and the offsets (in memory anyway); validate() adds the token scan.
  static TokenDataset open(const std::vector<std::string>& paths);

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

  int64_t num_docs() const;
  int64_t num_tokens() const;
  int64_t doc_length(int64_t doc) const;
  // Tokens [start, start + count) of document doc, into out (int32). Throws on a range
  // outside the document. One thread at a time: the HDF5 library is not thread-safe.
  void read(int64_t doc, int64_t start, int64_t count, int32_t* out) const;

  int vocab_size() const;
  int eos_id() const;
  const std::string& tokenizer() const;
  const std::string& tokenizer_sha256() const;  // "" when the files do not record it
  const std::vector<std::string>& files() const;
  // The global index of file i's first document (i == files().size(): num_docs()).
  int64_t first_doc_of_file(size_t i) const;

  // Full check: offsets start at 0, never decrease, end at len(tokens); every token in
  // [0, vocab_size); at least one document. Throws Error naming the file and the first
  // offending index. Reads all tokens (in chunks; memory does not grow with the file).
  void validate() const;

 private:
  struct Impl;
  explicit TokenDataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes a dataset file. Streams: memory does not grow with the corpus. Writes to
// "<path>.tmp.<pid>" and renames on close(), so an existing file is never half-written.
struct TokenWriterOptions {
  int vocab_size = 0;
  int eos_id = 0;
  int bos_id = -1;        // >= 0: every document starts with it (root attribute bos_id)
  std::string tokenizer;  // e.g. "bytes" or "sentencepiece:/path/m.model"
  std::string tokenizer_sha256;  // of the tokenizer's file ("" for bytes: not written)
  int compression = 0;    // gzip level 0 (off) .. 9
  int64_t chunk_tokens = 1 << 20;
};

class TokenWriter {
 public:
  TokenWriter(const std::string& path, const TokenWriterOptions& opts);
  ~TokenWriter();  // without close(): removes the temporary file
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // Appends one document (the caller appends EOS if it wants one). Throws Error for a
  // token outside [0, vocab_size).
  void add_document(const int32_t* tokens, int64_t n);
  // The same in pieces, for documents too long to hold: append() any number of times,
  // then end_document(). add_document(t, n) == append(t, n); end_document().
  void append(const int32_t* tokens, int64_t n);
  void end_document();
  void close();

  int64_t num_docs() const;
  int64_t num_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flexsp
