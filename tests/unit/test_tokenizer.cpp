// Tokenizers: exact ids of `bytes`; a sentencepiece model trained here with spm_train on a
// generated text (vocab, EOS, round trip, the name that rebuilds it); bad names and files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/tokenizer/tokenizer.h"
#include "lib/util/error.h"
#include "support/error_of.h"
#include "support/temp_dir_test.h"

namespace fs = std::filesystem;
using namespace flexsp;

namespace {

class TokenizerTest : public TempDirTest {
 protected:
  // Trains a tiny BPE model on generated sentences; returns the .model path ("" if
  // spm_train is not installed).
  std::string train(const std::string& prefix, const std::string& extra) {
    if (std::system("command -v spm_train > /dev/null 2>&1") != 0) return "";
    std::mt19937 rng(5);
    const char* words[] = {"the", "model", "packs", "long",   "sequences", "into",    "groups",
                           "of",  "ranks", "and",   "tokens", "flow",      "through", "layers"};
    std::ofstream f(path(prefix + ".txt"));
    for (int i = 0; i < 2000; ++i) {
      for (int w = 0; w < 8; ++w) f << (w ? " " : "") << words[rng() % 14];
      f << ".\n";
    }
    f.close();
    std::string cmd = fmt::format(
        "spm_train --input={} --model_prefix={} --vocab_size=100 --model_type=bpe {} "
        "> {} 2>&1",
        path(prefix + ".txt"), path(prefix), extra, path(prefix + ".log"));
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return path(prefix + ".model");
  }
};

}  // namespace

TEST_F(TokenizerTest, BytesExactIds) {
  auto t = make_bytes_tokenizer();
  EXPECT_EQ(t->vocab_size(), 257);
  EXPECT_EQ(t->eos_id(), 256);
  EXPECT_EQ(t->name(), "bytes");
  EXPECT_TRUE(t->context_free());
  std::string s = std::string("Hi\n") + '\0' + "\xff\x80";
  std::vector<int32_t> ids = t->encode(s);
  EXPECT_EQ(ids, (std::vector<int32_t>{72, 105, 10, 0, 255, 128}));
  EXPECT_EQ(t->decode(ids.data(), static_cast<int64_t>(ids.size())), s);
  EXPECT_TRUE(t->encode("").empty());
  int32_t bad = 300;
  EXPECT_THROW(t->decode(&bad, 1), Error);
  EXPECT_EQ(make_tokenizer("bytes")->name(), "bytes");
}

TEST_F(TokenizerTest, SentencePieceModel) {
  std::string model = train("m", "");
  if (model.empty()) GTEST_SKIP() << "spm_train not installed";
  auto t = make_sentencepiece_tokenizer(model);
  EXPECT_EQ(t->vocab_size(), 100);
  EXPECT_EQ(t->eos_id(), 2);  // spm_train's default: unk 0, bos 1, eos 2
  EXPECT_EQ(t->name(), "sentencepiece:" + fs::absolute(model).lexically_normal().string());
  EXPECT_FALSE(t->context_free());
  std::string text = "the model packs long sequences into groups of ranks.";
  std::vector<int32_t> ids = t->encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_LT(ids.size(), text.size());  // merges happened
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, t->vocab_size());
    EXPECT_NE(id, t->eos_id());
  }
  EXPECT_EQ(t->decode(ids.data(), static_cast<int64_t>(ids.size())), text);
  // The name rebuilds the same tokenizer, from any working directory.
  auto again = make_tokenizer(t->name());
  EXPECT_EQ(again->encode(text), ids);
  EXPECT_EQ(again->vocab_size(), 100);
}

TEST_F(TokenizerTest, SentencePieceWithoutEosGetsANewId) {
  std::string model = train("noeos", "--eos_id=-1");
  if (model.empty()) GTEST_SKIP() << "spm_train not installed";
  auto t = make_sentencepiece_tokenizer(model);
  EXPECT_EQ(t->eos_id(), 100);
  EXPECT_EQ(t->vocab_size(), 101);
  std::vector<int32_t> ids = t->encode("tokens flow");
  ids.push_back(t->eos_id());
  EXPECT_EQ(t->decode(ids.data(), static_cast<int64_t>(ids.size())), "tokens flow");
}

TEST_F(TokenizerTest, BadNamesAndFiles) {
  EXPECT_EQ(error_of([] { make_tokenizer("gpt2"); }),
            "unknown tokenizer 'gpt2' (expected bytes, sentencepiece:<model> or hf:<tokenizer.json>)");
  EXPECT_NE(error_of([] { make_tokenizer("sentencepiece"); }).find("--sp-model"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { make_sentencepiece_tokenizer(path("none.model")); }),
            path("none.model") + ": sentencepiece model not found");
  std::ofstream(path("junk.model")) << "not a model";
  std::string msg = error_of([&] { make_sentencepiece_tokenizer(path("junk.model")); });
  EXPECT_EQ(msg.rfind(path("junk.model") + ": not a sentencepiece model", 0), 0u) << msg;
}
