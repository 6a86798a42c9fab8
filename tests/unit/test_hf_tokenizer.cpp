// The tokenizer.json reader on small files written here: merges by rank (not by length or
// position), the byte alphabet, added tokens with their options, NFC, BOS/EOS from the
// template, the config or the names, the name and hash; UTF-8 repair as Python's; and
// every unsupported or malformed file refused with one line naming the file and key.
// (Every id against Hugging Face tokenizers on a real corpus: tests/reference/test_hf_tokenizer.sh.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/tokenizer/bpe.h"
#include "io/tokenizer/regex.h"
#include "io/tokenizer/text.h"
#include "io/tokenizer/tokenizer.h"
#include "io/util/sha256.h"
#include "support/error_of.h"
#include "support/temp_dir_test.h"

using namespace flexsp;
using json = nlohmann::json;

namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte as the byte-level alphabet shows it.
std::string shown(unsigned char b) { return utf8(byte_to_unicode(b)); }

class HfTokenizerTest : public TempDirTest {
 protected:
  // ids 0..255: the bytes; then the merges' results in order; then the added tokens.
  json make(const std::vector<std::pair<std::string, std::string>>& merges) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[shown(static_cast<unsigned char>(b))] = b;
    json m = json::array();
    for (const auto& [a, b] : merges) {
      vocab[a + b] = static_cast<int>(vocab.size());
      m.push_back(a + " " + b);
    }
    json j;
    j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", m}};
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    j["added_tokens"] = json::array({{{"id", 300}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}});
    return j;
  }
  std::string write(const json& j, const std::string& name = "tokenizer.json") {
    std::ofstream(path(name)) << j.dump();
    return path(name);
  }
  std::vector<int32_t> ids(const json& j, const std::string& text) {
    return make_hf_tokenizer(write(j))->encode(text);
  }
};

}  // namespace

TEST_F(HfTokenizerTest, MergesByRankAndAlphabet) {
  const std::string G = shown(' ');  // "Ġ"
  // "b c" outranks "a b": "abc" is a + bc, not ab + c.
  json j = make({{"b", "c"}, {"a", "b"}, {G, "a"}, {"ab", "c"}});
  EXPECT_EQ(ids(j, "abc"), (std::vector<int32_t>{'a', 256}));
  // " ab": "a b" (rank 1) merges before "Ġ a" (rank 2) could.
  EXPECT_EQ(ids(j, "ab ab"), (std::vector<int32_t>{257, ' ', 257}));
  EXPECT_EQ(ids(j, "ac ac"), (std::vector<int32_t>{'a', 'c', 258, 'c'}));
  // Bytes outside ASCII go through the alphabet: é is C3 A9, each its own token.
  EXPECT_EQ(ids(j, "\xC3\xA9"), (std::vector<int32_t>{0xC3, 0xA9}));
  // Equal ranks merge left first: "aaa" with "a a" is aa + a.
  json k = make({{"a", "a"}});
  EXPECT_EQ(ids(k, "aaa"), (std::vector<int32_t>{256, 'a'}));
  auto t = make_hf_tokenizer(write(j));
  const std::vector<int32_t> v = t->encode("abc ab\xC3\xA9<eos>");
  EXPECT_EQ(t->decode(v.data(), static_cast<int64_t>(v.size())), "abc ab\xC3\xA9<eos>");
  EXPECT_EQ(t->vocab_size(), 301);
  EXPECT_EQ(t->eos_id(), 300);  // by its name among the added tokens
  EXPECT_EQ(t->bos_id(), -1);
}

TEST_F(HfTokenizerTest, AddedTokensAndSpecials) {
  json j = make({});
  j["added_tokens"].push_back({{"id", 301}, {"content", "<bos>"}, {"special", true}, {"normalized", false}});
  j["added_tokens"].push_back({{"id", 302}, {"content", "tok"}, {"single_word", true}});
  j["added_tokens"].push_back({{"id", 303}, {"content", "<t>"}, {"lstrip", true}, {"rstrip", true}});
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {301}}, {"tokens", {"<bos>"}}}}}}};
  auto t = make_hf_tokenizer(write(j));
  EXPECT_EQ(t->bos_id(), 301);
  EXPECT_EQ(t->eos_id(), 300);
  EXPECT_EQ(t->encode("<bos>x<eos>"), (std::vector<int32_t>{301, 'x', 300}));
  // single_word: not inside a word; lstrip / rstrip: the spaces go with the token.
  EXPECT_EQ(t->encode("a tok"), (std::vector<int32_t>{'a', ' ', 302}));
  EXPECT_EQ(t->encode("atok"), (std::vector<int32_t>{'a', 't', 'o', 'k'}));
  EXPECT_EQ(t->encode("a  <t>  b"), (std::vector<int32_t>{'a', 303, 'b'}));
  // tokenizer_config.json beside the file names EOS (and BOS) instead.
  std::ofstream(path("tokenizer_config.json")) << R"({"bos_token": null, "eos_token": {"content": "<bos>"}})";
  auto c = make_hf_tokenizer(dir_);
  EXPECT_EQ(c->eos_id(), 301);
  EXPECT_EQ(c->bos_id(), -1);
  // The name rebuilds it; the hash is the file's.
  EXPECT_EQ(make_tokenizer(c->name())->eos_id(), 301);
  EXPECT_EQ(c->name(), "hf:" + path("tokenizer.json"));
  std::ifstream f(path("tokenizer.json"));
  EXPECT_EQ(c->sha256(), sha256_hex(std::string(std::istreambuf_iterator<char>(f), {})));
}

TEST_F(HfTokenizerTest, NormalizerNfcAndSplitSequence) {
  json j = make({});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}"}}},
                                                        {"behavior", "Isolated"}, {"invert", false}},
                                                       {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                        {"use_regex", false}}})}};
  // e + combining acute composes to é (C3 A9).
  EXPECT_EQ(ids(j, "e\xCC\x81"), (std::vector<int32_t>{0xC3, 0xA9}));
}

TEST_F(HfTokenizerTest, Utf8RepairIsPythons) {
  // bytes.decode("utf-8", errors="replace"): one U+FFFD per maximal ill-formed subpart.
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_repair("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8_repair("\xFF\xFE"), R + R);
  EXPECT_EQ(utf8_repair("\xC3("), R + "(");
  EXPECT_EQ(utf8_repair("\xE0\x80"), R + R);          // E0 needs A0..BF next
  EXPECT_EQ(utf8_repair("\xED\xA0\x80"), R + R + R);  // a surrogate
  EXPECT_EQ(utf8_repair("\xF0\x9F\x98"), R);          // truncated: one
  EXPECT_EQ(utf8_repair("\xF4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(utf8_repair("a\xE2\x82"), "a" + R);
  EXPECT_EQ(regex_onig_compatible("[^\\s\\p{L}]\\S\\\\s"), "[^\\p{White_Space}\\p{L}]\\P{White_Space}\\\\s");
}

TEST_F(HfTokenizerTest, UnsupportedAndMalformedFilesAreRefused) {
  const std::string p = path("tokenizer.json");
  auto err = [&](const json& j) { return error_of([&] { make_hf_tokenizer(write(j)); }); };
  json wp = make({});
  wp["model"]["type"] = "WordPiece";
  EXPECT_EQ(err(wp), p + ": model.type is 'WordPiece': flexsp reads byte-level BPE tokenizers (GPT-2, "
                         "Llama 3, Qwen); for a sentencepiece model use --sp-model");
  json uni = make({});
  uni["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  EXPECT_NE(err(uni).find(p + ": model.type is 'Unigram'"), std::string::npos);
  json meta = make({});
  meta["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  EXPECT_EQ(err(meta), p + ": pre_tokenizer: pre-tokenizer 'Metaspace' is not supported (byte-level BPE: "
                           "Split, ByteLevel, Sequence)");
  json fallback = make({});
  fallback["model"]["byte_fallback"] = true;
  EXPECT_NE(err(fallback).find(p + ": model.byte_fallback"), std::string::npos);
  json lower = make({});
  lower["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(err(lower), p + ": normalizer: normalizer 'Lowercase' is not supported (none or NFC)");
  json merge = make({{"a", "b"}});
  merge["model"]["merges"].push_back("ab zz");
  EXPECT_EQ(err(merge), p + ": model.merges[1] 'ab zz': 'zz' is not in the vocabulary");
  json noeos = make({});
  noeos["added_tokens"] = json::array();
  EXPECT_NE(err(noeos).find(p + ": no EOS token"), std::string::npos);
  json split = make({});
  split["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "("}}}, {"behavior", "Removed"}};
  EXPECT_EQ(err(split), p + ": pre_tokenizer.behavior: 'Removed' is not supported (Isolated is)");
  json roberta = make({});
  roberta["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", "<s>"}, {"sep", 5}};
  EXPECT_EQ(err(roberta).rfind(p + ": unexpected tokenizer.json content: ", 0), 0u) << err(roberta);
  std::ofstream(p) << "{\"model\": {\"type\": \"BPE\",";
  EXPECT_EQ(error_of([&] { make_hf_tokenizer(p); }).rfind(p + ": malformed JSON: ", 0), 0u);
  EXPECT_EQ(error_of([&] { make_hf_tokenizer(path("none")); }), path("none") + ": tokenizer.json not found");
}
