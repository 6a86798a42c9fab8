// Tokenizers: text -> token ids, for `flexsp pack` (and later for sampling).
//
// One small interface with three implementations: `bytes` (id = byte value, EOS = 256,
// vocab 257; no model file, exact and reversible), `sentencepiece` (a trained .model
// loaded through libsentencepiece) and `hf` (a Hugging Face tokenizer.json holding a
// byte-level BPE: GPT-2, Llama 3, Qwen; io/tokenizer/hf_tokenizer.cpp). A tokenizer is
// named by one string, the one stored in a dataset's `tokenizer` attribute ("bytes",
// "sentencepiece:/abs/path/m.model", "hf:/abs/path/tokenizer.json"), so a dataset records
// what produced it and make_tokenizer() can rebuild it from that name; a tokenizer read
// from a file also gives that file's SHA-256, which the dataset records beside the name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flexsp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of text, without EOS (the packer appends it).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of ids; ids outside the vocabulary are an Error.
  virtual std::string decode(const int32_t* ids, int64_t n) const = 0;
  virtual int vocab_size() const = 0;
  virtual int eos_id() const = 0;
  // The id that starts a sequence (sentencepiece's <s>), or -1 when there is none.
  virtual int bos_id() const { return -1; }
  // The dataset attribute that names this tokenizer; make_tokenizer(name()) rebuilds it.
  virtual std::string name() const = 0;
  // SHA-256 (hex) of the file the tokenizer was read from; "" for `bytes`.
  virtual std::string sha256() const { return ""; }
  // True when encode(a + b) == encode(a) + encode(b) for all a, b: callers may then encode
  // a long text block by block with bounded memory.
  virtual bool context_free() const { return false; }
};

// ids 0..255 are the bytes; EOS = 256; vocab 257.
std::unique_ptr<Tokenizer> make_bytes_tokenizer();

// Loads an existing sentencepiece model. vocab = the model's piece count; EOS = the
// model's eos id, or, for a model trained without one, a new id appended (vocab + 1).
// Throws Error naming the file when it is missing or not a sentencepiece model.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path);

// Loads a Hugging Face tokenizer.json (a folder holding one, or the file) of a byte-level
// BPE model. The ids equal `tokenizers`' encode(text, add_special_tokens=False) on the
// text with invalid UTF-8 replaced by U+FFFD. Throws Error naming the file and key of
// anything it does not support (WordPiece, Unigram, other normalizers or pre-tokenizers)
// or of a malformed file.
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& dir_or_file);

// From a name: "bytes", "sentencepiece:<model path>" or "hf:<tokenizer.json path>".
// Throws Error naming the tokenizer when it is unknown.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace flexsp
