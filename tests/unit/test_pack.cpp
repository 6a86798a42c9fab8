// Packing: a directory tree (glob filter, sorted order, EOS, empty files skipped), JSON
// lines (text, tokens, bad lines named by line number), .npy arrays, --force, streaming
// with small chunks, and that a failed pack leaves nothing behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/dataset/token_dataset.h"
#include "io/hdf5/h5.h"
#include "io/pack/pack.h"
#include "io/tokenizer/tokenizer.h"
#include "lib/util/error.h"
#include "support/error_of.h"
#include "support/temp_dir_test.h"

namespace fs = std::filesystem;
using namespace flexsp;

namespace {

class PackTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    tok_ = make_bytes_tokenizer();
  }
  void put(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name), std::ios::binary) << text;
  }
  PackOptions opts(std::vector<std::string> inputs, const std::string& out = "out.h5") const {
    PackOptions o;
    o.out = path(out);
    for (auto& i : inputs) o.inputs.push_back(path(i));
    return o;
  }
  std::unique_ptr<Tokenizer> tok_;
};

std::vector<int32_t> ids(const std::string& s, bool eos = true) {
  std::vector<int32_t> v(s.begin(), s.end());
  for (auto& x : v) x &= 0xff;
  if (eos) v.push_back(256);
  return v;
}

std::vector<std::vector<int32_t>> read_all(const std::string& p) {
  TokenDataset ds = TokenDataset::open({p});
  ds.validate();
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < ds.num_docs(); ++i) {
    docs.emplace_back(static_cast<size_t>(ds.doc_length(i)));
    ds.read(i, 0, ds.doc_length(i), docs.back().data());
  }
  return docs;
}

}  // namespace

TEST_F(PackTest, DirectoryTreeSortedFilteredEos) {
  put("src/b.h", "second");
  put("src/a.h", "first");
  put("src/sub/c.h", "third\n");
  put("src/empty.h", "");
  put("src/notes.txt", "ignored by the glob");
  PackOptions o = opts({"src"});
  o.glob = "*.h";
  EXPECT_EQ(list_pack_inputs(o.inputs, o.glob),
            (std::vector<std::string>{path("src/a.h"), path("src/b.h"), path("src/empty.h"),
                                      path("src/sub/c.h")}));
  PackStats s = pack(o, *tok_);
  EXPECT_EQ(s.files, 4);
  EXPECT_EQ(s.documents, 3);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(s.tokens, 5 + 6 + 6 + 3);
  EXPECT_EQ(s.bytes_read, 17);
  auto docs = read_all(o.out);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], ids("first"));
  EXPECT_EQ(docs[1], ids("second"));
  EXPECT_EQ(docs[2], ids("third\n"));
  TokenDataset ds = TokenDataset::open({o.out});
  EXPECT_EQ(ds.tokenizer(), "bytes");
  EXPECT_EQ(ds.vocab_size(), 257);
}

TEST_F(PackTest, JsonLines) {
  put("d.jsonl",
      "{\"text\": \"hello\"}\n"
      "\n"
      "{\"tokens\": [1, 2, 256, 3]}\r\n"
      "{\"text\": \"\"}\n"
      "{\"text\": \"caf\\u00e9\", \"meta\": 1}");  // no final newline
  PackStats s = pack(opts({"d.jsonl"}), *tok_);
  EXPECT_EQ(s.documents, 3);
  EXPECT_EQ(s.skipped, 1);
  auto docs = read_all(path("out.h5"));
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], ids("hello"));
  EXPECT_EQ(docs[1], (std::vector<int32_t>{1, 2, 256, 3, 256}));
  EXPECT_EQ(docs[2], ids("caf\xc3\xa9"));

  // --jsonl reads any file name as JSON lines.
  put("lines.txt", "{\"text\": \"x\"}\n{\"text\": \"y\"}\n");
  PackOptions o = opts({"lines.txt"}, "j.h5");
  o.jsonl = true;
  EXPECT_EQ(pack(o, *tok_).documents, 2);
}

TEST_F(PackTest, BadJsonLinesNameFileAndLine) {
  struct Case {
    const char* text;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", "bad.jsonl:2: malformed JSON"},
      {"{\"text\": \"a\"}\n\n{\"tokens\": [1, 999]}\n",
       "bad.jsonl:3: tokens[1] = 999 is outside [0, vocab_size = 257)"},
      {"{\"tokens\": [1, -1]}\n", "bad.jsonl:1: tokens[1] = -1 is outside"},
      {"{\"tokens\": [1, 2.5]}\n", "bad.jsonl:1: tokens[1] = 2.5 is not an integer"},
      {"{\"tokens\": \"abc\"}\n", "bad.jsonl:1: \"tokens\" must be an array"},
      {"{\"text\": 5}\n", "bad.jsonl:1: \"text\" must be a string"},
      {"{\"body\": \"x\"}\n", "bad.jsonl:1: expected an object with \"text\" or \"tokens\""},
      {"[1, 2]\n", "bad.jsonl:1: expected an object"},
  };
  for (const Case& c : cases) {
    put("bad.jsonl", c.text);
    std::string msg = error_of([&] { pack(opts({"bad.jsonl"}), *tok_); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.text << " -> " << msg;
    EXPECT_NE(msg.find(path("bad.jsonl")), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path("out.h5")));
  }
  // Nothing but bad.jsonl is left: no output, no temporary file.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(PackTest, NpyArrays) {
  auto npy = [&](const std::string& name, const std::string& descr, const std::string& shape,
                 const std::string& data) {
    std::string h =
        fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
    h.append(64 - (10 + h.size() + 1) % 64, ' ');
    h.push_back('\n');
    std::string f = std::string("\x93NUMPY\x01\x00", 8);
    f.push_back(static_cast<char>(h.size() & 0xff));
    f.push_back(static_cast<char>(h.size() >> 8));
    put(name, f + h + data);
  };
  npy("a.npy", "<u2", "(3,)", std::string("\x05\x00\x00\x01\x10\x00", 6));  // 5, 256, 16
  npy("b.npy", "<i4", "(2,)", std::string("\x07\x00\x00\x00\x08\x00\x00\x00", 8));
  PackStats s = pack(opts({"a.npy", "b.npy"}), *tok_);
  EXPECT_EQ(s.documents, 2);
  auto docs = read_all(path("out.h5"));
  EXPECT_EQ(docs[0], (std::vector<int32_t>{5, 256, 16, 256}));
  EXPECT_EQ(docs[1], (std::vector<int32_t>{7, 8, 256}));

  npy("c.npy", "<i4", "(1,)", std::string("\xff\xff\xff\xff", 4));
  std::string msg = error_of([&] { pack(opts({"c.npy"}, "c.h5"), *tok_); });
  EXPECT_NE(msg.find("c.npy: token -1 at index 0 is outside"), std::string::npos) << msg;
  npy("d.npy", "<f4", "(1,)", std::string(4, '\0'));
  msg = error_of([&] { pack(opts({"d.npy"}, "d.h5"), *tok_); });
  EXPECT_NE(msg.find("d.npy: dtype '<f4'"), std::string::npos) << msg;
  npy("e.npy", "<u2", "(2, 2)", std::string(8, '\0'));
  msg = error_of([&] { pack(opts({"e.npy"}, "e.h5"), *tok_); });
  EXPECT_NE(msg.find("e.npy: expected a 1-D array"), std::string::npos) << msg;
  npy("f.npy", "<u2", "(9,)", std::string(4, '\0'));
  msg = error_of([&] { pack(opts({"f.npy"}, "f.h5"), *tok_); });
  EXPECT_NE(msg.find("f.npy: truncated"), std::string::npos) << msg;
}

TEST_F(PackTest, OutputIsNeverOverwrittenWithoutForce) {
  put("in.txt", "abc");
  put("out.h5", "precious");
  std::string msg = error_of([&] { pack(opts({"in.txt"}), *tok_); });
  EXPECT_EQ(msg, path("out.h5") + ": already exists (use --force to overwrite)");
  std::ifstream f(path("out.h5"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "precious");

  // A failing pack with --force keeps the old file too.
  PackOptions o = opts({"in.txt", "missing.txt"});
  o.force = true;
  msg = error_of([&] { pack(o, *tok_); });
  EXPECT_EQ(msg, path("missing.txt") + ": no such file or directory");
  std::ifstream g(path("out.h5"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(g), {}), "precious");

  o.inputs = {path("in.txt")};
  pack(o, *tok_);
  EXPECT_EQ(read_all(path("out.h5")).at(0), ids("abc"));
}

TEST_F(PackTest, StreamsThroughSmallChunks) {
  // 300 KB in one file, 1000-token chunks: many chunk flushes, one long document.
  std::string big;
  for (int i = 0; i < 300000; ++i) big.push_back(static_cast<char>('a' + i % 26));
  put("big.txt", big);
  put("small.txt", "s");
  PackOptions o = opts({"big.txt", "small.txt"});
  o.chunk_tokens = 1000;
  o.compression = 4;
  PackStats s = pack(o, *tok_);
  EXPECT_EQ(s.tokens, 300001 + 2);
  auto docs = read_all(o.out);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], ids(big));
  EXPECT_EQ(docs[1], ids("s"));
  h5::Id f = h5::open_file(o.out);
  h5::Id d = h5::open_dataset(f.get(), "/tokens");
  h5::Id dcpl = h5::plist_id(H5Dget_create_plist(d.get()));
  hsize_t chunk = 0;
  H5Pget_chunk(dcpl.get(), 1, &chunk);
  EXPECT_EQ(chunk, 1000u);
}

TEST_F(PackTest, BadInputs) {
  EXPECT_EQ(error_of([&] { pack(opts({"nope"}), *tok_); }),
            path("nope") + ": no such file or directory");
  put("empty/a.txt", "");
  EXPECT_NE(error_of([&] { pack(opts({"empty"}), *tok_); }).find("no documents"),
            std::string::npos);
  put("x.txt", "x");
  PackOptions o = opts({"x.txt"});
  o.glob = "*.h";  // the glob filters directories only; named files are always packed
  EXPECT_EQ(pack(o, *tok_).documents, 1);
  o = opts({"empty"}, "e.h5");
  o.glob = "*.h";
  EXPECT_NE(error_of([&] { pack(o, *tok_); }).find("no input files"), std::string::npos);
  if (::geteuid() != 0) {  // root reads anything
    put("locked.txt", "x");
    fs::permissions(path("locked.txt"), fs::perms::none);
    EXPECT_NE(error_of([&] {
                pack(opts({"locked.txt"}, "l.h5"), *tok_);
              }).find("locked.txt: cannot open"),
              std::string::npos);
  }
}

TEST_F(PackTest, Deterministic) {
  put("c/1.txt", "one");
  put("c/2/3.txt", "three");
  put("c/0.txt", "zero");
  pack(opts({"c"}, "a.h5"), *tok_);
  pack(opts({"c"}, "b.h5"), *tok_);
  EXPECT_EQ(read_all(path("a.h5")), read_all(path("b.h5")));
  EXPECT_EQ(read_all(path("a.h5")).at(0), ids("zero"));
}
