// Hugging Face tokenizer.json, byte-level BPE (GPT-2, Llama 3, Qwen, Mistral-Nemo): the
// file is read into a pipeline that mirrors `tokenizers`' encode(text,
// add_special_tokens=False): UTF-8 repair (text.h), added tokens matched in the raw text,
// the normalizer (none or NFC) on the rest, added tokens with normalized = true, the
// pre-tokenizer's steps (regex Splits, isolated, then ByteLevel with its optional prefix
// space and GPT-2 regex), and the BPE model on each word. Whatever the file asks for
// that this pipeline does not do is refused by name when the file is read, never
// approximated: other model types (WordPiece, Unigram), other normalizers,
// pre-tokenizers or split behaviours, BPE dropout, byte fallback, subword affixes.
//
// BOS and EOS: tokenizer.json has no field for them, so they come from
// tokenizer_config.json beside it when it names them (bos_token / eos_token, as
// transformers reads them), else from the post-processor (the special token its template
// puts before / after the text), and EOS else from the usual names among the special
// tokens (<|end_of_text|>, <|endoftext|>, </s>, <eos>).
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "io/tokenizer/added_tokens.h"
#include "io/tokenizer/bpe.h"
#include "io/tokenizer/regex.h"
#include "io/tokenizer/text.h"
#include "io/tokenizer/tokenizer.h"
#include "io/util/sha256.h"
#include "lib/util/error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace flexsp {

namespace {

// The pattern of tokenizers' ByteLevel pre-tokenizer (GPT-2's).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

json parse_json(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    std::string why = e.what();
    const size_t cut = why.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
    fail(fmt::format("{}: malformed JSON: {}", path, cut == std::string::npos ? why : why.substr(cut + 2)));
  }
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FLEXSP_CHECK(f.good(), "{}: cannot open", path);
  std::ostringstream s;
  s << f.rdbuf();
  FLEXSP_CHECK(!f.bad(), "{}: read error", path);
  return s.str();
}

// obj[key] when it is of the wanted kind; `fallback` when absent or null.
bool get_bool(const json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  FLEXSP_CHECK(obj[key].is_boolean(), "{}.{}: expected true or false, got {}", where, key, obj[key].dump());
  return obj[key].get<bool>();
}

std::string type_of(const json& obj, const std::string& where) {
  FLEXSP_CHECK(obj.is_object() && obj.contains("type") && obj["type"].is_string(),
               "{}: expected an object with a \"type\"", where);
  return obj["type"].get<std::string>();
}

// A pre-tokenizer step: a regex Split (isolated) or the final ByteLevel.
struct PreStep {
  std::unique_ptr<Regex> re;  // the split pattern; ByteLevel: GPT-2's, or none
  bool byte_level = false, add_prefix_space = false;
};

void parse_pre_tokenizer(const json& p, const std::string& where, std::vector<PreStep>& steps) {
  const std::string type = type_of(p, where);
  if (type == "Sequence") {
    FLEXSP_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(),
                 "{}.pretokenizers: expected an array", where);
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(p["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", where, i), steps);
    return;
  }
  FLEXSP_CHECK(steps.empty() || !steps.back().byte_level,
               "{}: a {} step after ByteLevel is not supported (ByteLevel must come last)", where, type);
  PreStep s;
  if (type == "Split") {
    const std::string behavior = p.value("behavior", "");
    FLEXSP_CHECK(behavior == "Isolated", "{}.behavior: '{}' is not supported (Isolated is)", where, behavior);
    const json& pat = p.contains("pattern") ? p["pattern"] : json();
    const bool literal = pat.is_object() && pat.contains("String") && pat["String"].is_string();
    FLEXSP_CHECK(literal || (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()),
                 "{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    // With isolated pieces, invert changes nothing: matches and gaps are both kept apart.
    s.re = std::make_unique<Regex>(pat[literal ? "String" : "Regex"].get<std::string>(), literal,
                                   where + ".pattern");
  } else if (type == "ByteLevel") {
    s.byte_level = true;
    s.add_prefix_space = get_bool(p, "add_prefix_space", true, where);
    if (get_bool(p, "use_regex", true, where)) s.re = std::make_unique<Regex>(kGpt2Pattern, false, where);
  } else {
    fail(fmt::format("{}: pre-tokenizer '{}' is not supported (byte-level BPE: Split, ByteLevel, Sequence)",
                     where, type));
  }
  steps.push_back(std::move(s));
}

// True for NFC, false for none; anything else is refused.
bool parse_normalizer(const json& n, const std::string& where) {
  if (n.is_null()) return false;
  const std::string type = type_of(n, where);
  if (type == "NFC") return true;
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    bool nfc = false;
    for (size_t i = 0; i < n["normalizers"].size(); ++i)
      nfc |= parse_normalizer(n["normalizers"][i], fmt::format("{}.normalizers[{}]", where, i));
    return nfc;
  }
  fail(fmt::format("{}: normalizer '{}' is not supported (none or NFC)", where, type));
}

BpeSpec parse_model(const json& m, const std::string& path) {
  const std::string where = path + ": model";
  const std::string type = type_of(m, where);
  FLEXSP_CHECK(type == "BPE",
               "{}.type is '{}': flexsp reads byte-level BPE tokenizers (GPT-2, Llama 3, Qwen); for a "
               "sentencepiece model use --sp-model",
               where, type);
  FLEXSP_CHECK(m.value("dropout", json()).is_null() || m["dropout"] == 0.0,
               "{}.dropout: BPE dropout is not supported (packing must be deterministic)", where);
  FLEXSP_CHECK(!get_bool(m, "byte_fallback", false, where),
               "{}.byte_fallback: a byte-fallback BPE is not byte-level (use --sp-model with its tokenizer.model)",
               where);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    FLEXSP_CHECK(!m.contains(k) || m[k].is_null() || m[k] == "", "{}.{}: subword affixes are not supported", where, k);
  FLEXSP_CHECK(m.contains("vocab") && m["vocab"].is_object(), "{}.vocab: expected an object of token: id", where);
  FLEXSP_CHECK(m.contains("merges") && m["merges"].is_array(), "{}.merges: expected an array", where);
  BpeSpec spec;
  spec.vocab.reserve(m["vocab"].size());
  for (const auto& [token, id] : m["vocab"].items()) {
    FLEXSP_CHECK(id.is_number_integer(), "{}.vocab['{}']: the id must be an integer", where, token);
    spec.vocab.emplace_back(token, id.get<int32_t>());
  }
  const json& merges = m["merges"];
  spec.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    if (e.is_string()) {  // "left right" (older files)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      FLEXSP_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                   "{}.merges[{}]: '{}' is not two tokens separated by one space", where, r, s);
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      FLEXSP_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                   "{}.merges[{}]: expected \"left right\" or [\"left\", \"right\"]", where, r);
      spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) spec.unk_token = m["unk_token"].get<std::string>();
  spec.fuse_unk = get_bool(m, "fuse_unk", false, where);
  spec.ignore_merges = get_bool(m, "ignore_merges", false, where);
  return spec;
}

std::vector<AddedToken> parse_added(const json& a, const std::string& path) {
  std::vector<AddedToken> out;
  if (a.is_null()) return out;
  FLEXSP_CHECK(a.is_array(), "{}: added_tokens: expected an array", path);
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string where = fmt::format("{}: added_tokens[{}]", path, i);
    const json& t = a[i];
    FLEXSP_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 &&
                     t.contains("content") && t["content"].is_string(),
                 "{}: expected an object with a non-negative \"id\" and a \"content\" string", where);
    AddedToken k;
    k.id = t["id"].get<int32_t>();
    k.content = t["content"].get<std::string>();
    k.single_word = get_bool(t, "single_word", false, where);
    k.lstrip = get_bool(t, "lstrip", false, where);
    k.rstrip = get_bool(t, "rstrip", false, where);
    k.special = get_bool(t, "special", false, where);
    k.normalized = get_bool(t, "normalized", !k.special, where);
    out.push_back(std::move(k));
  }
  return out;
}

// The special token ids a post-processor puts before and after the text (-1: none).
void template_ends(const json& p, int* bos, int* eos) {
  if (!p.is_object()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& q : p["processors"]) template_ends(q, bos, eos);
  } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array()) {
    bool seen_text = false;
    for (const json& item : p["single"]) {
      if (item.contains("Sequence")) {
        seen_text = true;
        continue;
      }
      if (!item.contains("SpecialToken")) continue;
      const std::string name = item["SpecialToken"].value("id", "");
      const json& st = p.value("special_tokens", json::object());
      if (!st.contains(name) || !st[name].contains("ids") || st[name]["ids"].size() != 1) continue;
      (seen_text ? *eos : *bos) = st[name]["ids"][0].get<int>();
    }
  } else if ((type == "RobertaProcessing" || type == "BertProcessing") && p.contains("cls") && p.contains("sep")) {
    *bos = p["cls"][1].get<int>();
    *eos = p["sep"][1].get<int>();
  }
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& dir_or_file);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t* ids, int64_t n) const override;
  int vocab_size() const override { return vocab_; }
  int eos_id() const override { return eos_; }
  int bos_id() const override { return bos_; }
  std::string name() const override { return "hf:" + path_; }
  std::string sha256() const override { return sha256_; }

 private:
  void encode_plain(std::string_view piece, std::vector<int32_t>& ids) const;
  void pre_tokenize(std::string_view piece, std::vector<int32_t>& ids) const;
  int find_token(const json& config_value) const;  // -1: null or absent
  void choose_specials(const json& post, const std::string& config_path);

  std::string path_, sha256_;
  bool nfc_ = false;
  std::vector<PreStep> steps_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::unique_ptr<AddedTokenMatcher> raw_, normalized_;
  std::unordered_map<int32_t, std::string> added_;  // id -> content
  std::unordered_map<std::string, int32_t> added_ids_;
  int vocab_ = 0, eos_ = -1, bos_ = -1;
};

HfTokenizer::HfTokenizer(const std::string& dir_or_file) {
  std::error_code ec;
  fs::path p = dir_or_file;
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  FLEXSP_CHECK(fs::is_regular_file(p, ec), "{}: tokenizer.json not found", p.string());
  path_ = fs::absolute(p, ec).lexically_normal().string();
  if (ec) path_ = p.string();
  const std::string text = read_text(path_);
  sha256_ = sha256_hex(text);
  const json j = parse_json(text, path_);
  FLEXSP_CHECK(j.is_object() && j.contains("model"), "{}: not a tokenizer.json (no \"model\")", path_);
  const BpeSpec spec = parse_model(j["model"], path_);
  nfc_ = parse_normalizer(j.value("normalizer", json()), path_ + ": normalizer");
  const json pre = j.value("pre_tokenizer", json());
  FLEXSP_CHECK(!pre.is_null(), "{}: pre_tokenizer is null: not a byte-level BPE (it needs ByteLevel)", path_);
  parse_pre_tokenizer(pre, path_ + ": pre_tokenizer", steps_);
  FLEXSP_CHECK(!steps_.empty() && steps_.back().byte_level,
               "{}: pre_tokenizer has no ByteLevel step: not a byte-level BPE", path_);
  bpe_ = std::make_unique<ByteLevelBpe>(spec, path_);

  std::vector<AddedToken> raw, normalized;
  int32_t top = bpe_->max_id();
  for (AddedToken& t : parse_added(j.value("added_tokens", json()), path_)) {
    top = std::max(top, t.id);
    added_[t.id] = t.content;
    added_ids_[t.content] = t.id;
    (t.normalized ? normalized : raw).push_back(t);
  }
  if (nfc_)
    for (AddedToken& t : normalized) t.content = utf8_nfc(t.content);
  raw_ = std::make_unique<AddedTokenMatcher>(std::move(raw));
  normalized_ = std::make_unique<AddedTokenMatcher>(std::move(normalized));
  vocab_ = top + 1;
  FLEXSP_CHECK(vocab_ > 0, "{}: the vocabulary is empty", path_);
  choose_specials(j.value("post_processor", json()), (fs::path(path_).parent_path() / "tokenizer_config.json").string());
}

int HfTokenizer::find_token(const json& v) const {
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) content = v["content"].get<std::string>();
  else return -1;
  if (auto it = added_ids_.find(content); it != added_ids_.end()) return it->second;
  const int32_t id = bpe_->find(content);
  FLEXSP_CHECK(id >= 0, "tokenizer_config.json beside {}: '{}' is not a token of this tokenizer", path_, content);
  return id;
}

void HfTokenizer::choose_specials(const json& post, const std::string& config_path) {
  template_ends(post, &bos_, &eos_);
  std::error_code ec;
  if (fs::is_regular_file(config_path, ec)) {
    const json c = parse_json(read_text(config_path), config_path);
    if (c.is_object() && c.contains("bos_token")) bos_ = find_token(c["bos_token"]);
    if (const int eos = c.is_object() && c.contains("eos_token") ? find_token(c["eos_token"]) : -1; eos >= 0) eos_ = eos;
  }
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"}) {
    if (eos_ >= 0) break;
    if (auto it = added_ids_.find(name); it != added_ids_.end()) eos_ = it->second;
  }
  FLEXSP_CHECK(eos_ >= 0,
               "{}: no EOS token: no eos_token in a tokenizer_config.json beside it, none after the text in "
               "post_processor, and none of <|end_of_text|>, <|endoftext|>, </s>, <eos> among added_tokens",
               path_);
  FLEXSP_CHECK(eos_ < vocab_ && bos_ < vocab_, "{}: post_processor names an id outside the vocabulary ({})",
               path_, vocab_);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  const std::string fixed = utf8_repair(text);
  std::vector<TextPiece> pieces;
  raw_->split(fixed, pieces);
  for (const TextPiece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    const std::string_view piece = std::string_view(fixed).substr(p.begin, p.end - p.begin);
    if (!nfc_) {
      encode_plain(piece, ids);
      continue;
    }
    const std::string norm = utf8_nfc(piece);
    encode_plain(norm, ids);
  }
  return ids;
}

// A normalized piece: its normalized added tokens, then the words between them.
void HfTokenizer::encode_plain(std::string_view piece, std::vector<int32_t>& ids) const {
  if (normalized_->empty()) return pre_tokenize(piece, ids);
  std::vector<TextPiece> pieces;
  normalized_->split(piece, pieces);
  for (const TextPiece& p : pieces) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      pre_tokenize(piece.substr(p.begin, p.end - p.begin), ids);
  }
}

void HfTokenizer::pre_tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> words{piece}, next;
  std::deque<std::string> owned;  // prefixed words; a deque keeps their addresses
  std::vector<std::pair<size_t, size_t>> spans;
  for (const PreStep& s : steps_) {
    next.clear();
    for (std::string_view w : words) {
      if (s.add_prefix_space && w.front() != ' ') {
        std::string& prefixed = owned.emplace_back(1, ' ');
        w = prefixed.append(w);
      }
      if (!s.re) {
        next.push_back(w);
        continue;
      }
      spans.clear();
      s.re->find_all(w, spans);
      size_t done = 0;
      for (const auto& [b, e] : spans) {
        if (b > done) next.push_back(w.substr(done, b - done));
        if (e > b) next.push_back(w.substr(b, e - b));
        done = std::max(done, e);
      }
      if (done < w.size()) next.push_back(w.substr(done));
    }
    words.swap(next);
  }
  for (std::string_view w : words) bpe_->encode_word(w, ids);
}

std::string HfTokenizer::decode(const int32_t* ids, int64_t n) const {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    FLEXSP_CHECK(ids[i] >= 0 && ids[i] < vocab_, "tokenizer {}: cannot decode id {}", name(), ids[i]);
    if (auto it = added_.find(ids[i]); it != added_.end())
      s += it->second;
    else
      s += bpe_->token_bytes(ids[i]);
  }
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& dir_or_file) {
  try {
    return std::make_unique<HfTokenizer>(dir_or_file);
  } catch (const json::exception& e) {  // a value of another type than the key's
    std::string why = e.what();
    const size_t cut = why.find("] ");
    fail(fmt::format("{}: unexpected tokenizer.json content: {}", dir_or_file,
                     cut == std::string::npos ? why : why.substr(cut + 2)));
  }
}

}  // namespace flexsp
