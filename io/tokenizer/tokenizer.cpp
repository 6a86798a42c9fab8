// Tokenizer implementations. The sentencepiece one keeps the absolute model path in its
// name, because a dataset outlives the working directory it was packed from.
#include "io/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <system_error>

#include "io/util/sha256.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const int32_t* ids, int64_t n) const override {
    std::string s;
    s.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      FLEXSP_CHECK(ids[i] >= 0 && ids[i] <= kEos, "tokenizer bytes: cannot decode id {}", ids[i]);
      if (ids[i] != kEos) s.push_back(static_cast<char>(ids[i]));
    }
    return s;
  }
  int vocab_size() const override { return kEos + 1; }
  int eos_id() const override { return kEos; }
  std::string name() const override { return "bytes"; }
  bool context_free() const override { return true; }

 private:
  static constexpr int kEos = 256;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    std::error_code ec;
    FLEXSP_CHECK(std::filesystem::is_regular_file(path, ec), "{}: sentencepiece model not found",
                 path);
    path_ = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (ec) path_ = path;
    auto st = sp_.Load(path_);
    FLEXSP_CHECK(st.ok(), "{}: not a sentencepiece model ({})", path, st.ToString());
    pieces_ = sp_.GetPieceSize();
    FLEXSP_CHECK(pieces_ > 0, "{}: sentencepiece model has no pieces", path);
    // A model trained with --eos_id=-1 has no EOS piece; give EOS the next free id.
    eos_ = sp_.eos_id() >= 0 ? sp_.eos_id() : pieces_;
    vocab_ = sp_.eos_id() >= 0 ? pieces_ : pieces_ + 1;
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    auto st = sp_.Encode(text, &ids);
    FLEXSP_CHECK(st.ok(), "tokenizer {}: cannot encode ({})", name(), st.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string decode(const int32_t* ids, int64_t n) const override {
    std::vector<int> v;
    v.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      FLEXSP_CHECK(ids[i] >= 0 && ids[i] < vocab_, "tokenizer {}: cannot decode id {}", name(),
                   ids[i]);
      if (ids[i] < pieces_) v.push_back(ids[i]);  // an appended EOS has no piece
    }
    std::string s;
    auto st = sp_.Decode(v, &s);
    FLEXSP_CHECK(st.ok(), "tokenizer {}: cannot decode ({})", name(), st.ToString());
    return s;
  }
  int vocab_size() const override { return vocab_; }
  int eos_id() const override { return eos_; }
  int bos_id() const override { return sp_.bos_id(); }  // -1 when trained without one
  std::string name() const override { return "sentencepiece:" + path_; }
  std::string sha256() const override { return sha256_file(path_); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  std::string path_;
  int pieces_ = 0, vocab_ = 0, eos_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bytes_tokenizer() { return std::make_unique<BytesTokenizer>(); }

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return make_bytes_tokenizer();
  const std::string sp = "sentencepiece:";
  if (name.rfind(sp, 0) == 0) {
    std::string path = name.substr(sp.size());
    FLEXSP_CHECK(!path.empty(), "tokenizer '{}': needs a model path (sentencepiece:<file>)", name);
    return make_sentencepiece_tokenizer(path);
  }
  const std::string hf = "hf:";
  if (name.rfind(hf, 0) == 0) {
    std::string path = name.substr(hf.size());
    FLEXSP_CHECK(!path.empty(), "tokenizer '{}': needs a tokenizer.json path (hf:<file>)", name);
    return make_hf_tokenizer(path);
  }
  FLEXSP_CHECK(name != "sentencepiece", "tokenizer 'sentencepiece' needs a model (--sp-model)");
  FLEXSP_CHECK(name != "hf", "tokenizer 'hf' needs a tokenizer.json (--hf-tokenizer)");
  fail(fmt::format("unknown tokenizer '{}' (expected bytes, sentencepiece:<model> or hf:<tokenizer.json>)", name));
}

}  // namespace flexsp
