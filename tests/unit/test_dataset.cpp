// Token datasets: writer/reader round trips (uint16 and int32, with and without gzip,
// several files, documents across chunk boundaries), reads of ranges, validate() on every
// defect of docs/datasets.md (files built by hand with the h5 helpers), expand_data_path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "io/dataset/data_sources.h"
#include "io/dataset/token_dataset.h"
#include "io/hdf5/h5.h"
#include "lib/util/error.h"
#include "support/error_of.h"
#include "support/temp_dir_test.h"

namespace fs = std::filesystem;
using namespace flexsp;

namespace {

using DatasetTest = TempDirTest;

using Docs = std::vector<std::vector<int32_t>>;

Docs random_docs(int n, int max_len, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  Docs docs(static_cast<size_t>(n));
  for (auto& d : docs) {
    d.resize(rng() % static_cast<unsigned>(max_len + 1));  // empty documents included
    for (auto& t : d) t = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  }
  return docs;
}

void write_docs(const std::string& path, const Docs& docs, int vocab, int level, int64_t chunk) {
  TokenWriterOptions o;
  o.vocab_size = vocab;
  o.eos_id = vocab - 1;
  o.tokenizer = "test";
  o.compression = level;
  o.chunk_tokens = chunk;
  TokenWriter w(path, o);
  for (const auto& d : docs) w.add_document(d.data(), static_cast<int64_t>(d.size()));
  EXPECT_EQ(w.num_docs(), static_cast<int64_t>(docs.size()));
  w.close();
}

std::vector<int32_t> read_doc(const TokenDataset& ds, int64_t i) {
  std::vector<int32_t> v(static_cast<size_t>(ds.doc_length(i)));
  ds.read(i, 0, static_cast<int64_t>(v.size()), v.data());
  return v;
}

// A dataset file written field by field, so each test can break exactly one thing.
struct RawFile {
  std::vector<int64_t> tokens = {1, 2, 3, 256, 4, 5, 256};
  std::vector<int64_t> offsets = {0, 4, 7};
  hid_t token_type = H5T_STD_U16LE;
  bool has_tokens = true, has_offsets = true, chunked = true, two_d = false;
  std::string schema = "flexsp.tokens";
  int64_t version = 1, vocab = 257, eos = 256;

  void write(const std::string& path) const {
    h5::NewFile f = h5::create_file(path);
    if (!schema.empty()) h5::write_attr(f.get(), "schema", schema);
    h5::write_attr(f.get(), "schema_version", version);
    h5::write_attr(f.get(), "vocab_size", vocab);
    h5::write_attr(f.get(), "eos_id", eos);
    h5::write_attr(f.get(), "tokenizer", "bytes");
    if (has_tokens) put(f.get(), "tokens", token_type, tokens);
    if (has_offsets) put(f.get(), "offsets", H5T_STD_I64LE, offsets);
  }
  void put(hid_t f, const char* name, hid_t type, const std::vector<int64_t>& v) const {
    hsize_t dims[2] = {v.size(), 1};
    int rank = two_d ? 2 : 1;
    h5::Id space = h5::space_id(H5Screate_simple(rank, dims, nullptr));
    h5::Id dcpl = h5::plist_id(H5Pcreate(H5P_DATASET_CREATE));
    hsize_t chunk[2] = {std::min<hsize_t>(3, v.size()), 1};
    if (chunked && !v.empty()) H5Pset_chunk(dcpl.get(), rank, chunk);
    h5::Id d = h5::dataset_id(
        H5Dcreate2(f, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    ASSERT_TRUE(d.valid());
    if (!v.empty()) {
      ASSERT_GE(H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    }
  }
};

}  // namespace

TEST_F(DatasetTest, RoundTripUint16AcrossChunks) {
  for (int level : {0, 6}) {
    Docs docs = random_docs(200, 40, 257, 1u + static_cast<unsigned>(level));
    std::string p = path(fmt::format("u16_{}.h5", level));
    write_docs(p, docs, 257, level, 7);  // tiny chunks: most documents span a boundary
    TokenDataset ds = TokenDataset::open({p});
    ASSERT_EQ(ds.num_docs(), 200);
    EXPECT_EQ(ds.vocab_size(), 257);
    EXPECT_EQ(ds.eos_id(), 256);
    EXPECT_EQ(ds.tokenizer(), "test");
    int64_t total = 0;
    for (int64_t i = 0; i < ds.num_docs(); ++i) {
      EXPECT_EQ(read_doc(ds, i), docs[static_cast<size_t>(i)]) << "doc " << i;
      total += ds.doc_length(i);
    }
    EXPECT_EQ(ds.num_tokens(), total);
    ds.validate();
    h5::Id f = h5::open_file(p);
    h5::Id d = h5::open_dataset(f.get(), "/tokens");
    h5::Id t = h5::type_id(H5Dget_type(d.get()));
    EXPECT_EQ(h5::type_name(t.get()), "uint16");
  }
}

TEST_F(DatasetTest, RoundTripInt32LargeVocab) {
  for (int level : {0, 3}) {
    Docs docs = random_docs(50, 100, 100000, 7u);
    std::string p = path(fmt::format("i32_{}.h5", level));
    write_docs(p, docs, 100000, level, 64);
    TokenDataset ds = TokenDataset::open({p});
    for (int64_t i = 0; i < ds.num_docs(); ++i)
      EXPECT_EQ(read_doc(ds, i), docs[static_cast<size_t>(i)]);
    ds.validate();
    h5::Id f = h5::open_file(p);
    h5::Id d = h5::open_dataset(f.get(), "/tokens");
    h5::Id t = h5::type_id(H5Dget_type(d.get()));
    EXPECT_EQ(h5::type_name(t.get()), "int32");
    EXPECT_EQ(h5::read_attr_string(f.get(), "schema"), "flexsp.tokens");
    EXPECT_EQ(h5::read_attr_int(f.get(), "schema_version"), 1);
    EXPECT_EQ(h5::read_attr_int(f.get(), "vocab_size"), 100000);
  }
}

TEST_F(DatasetTest, MultipleFilesAreOneSequence) {
  Docs all;
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    Docs docs = random_docs(10 + f, 20, 257, 100u + static_cast<unsigned>(f));
    files.push_back(path(fmt::format("part{}.h5", f)));
    write_docs(files.back(), docs, 257, f == 1 ? 1 : 0, 16);
    all.insert(all.end(), docs.begin(), docs.end());
  }
  TokenDataset ds = TokenDataset::open(files);
  ASSERT_EQ(ds.num_docs(), static_cast<int64_t>(all.size()));
  EXPECT_EQ(ds.files(), files);
  for (int64_t i = 0; i < ds.num_docs(); ++i)
    EXPECT_EQ(read_doc(ds, i), all[static_cast<size_t>(i)]) << "doc " << i;
  ds.validate();

  TokenDataset moved = std::move(ds);
  EXPECT_EQ(moved.num_docs(), static_cast<int64_t>(all.size()));
}

TEST_F(DatasetTest, FilesMustAgree) {
  write_docs(path("a.h5"), random_docs(3, 5, 257, 1), 257, 0, 8);
  write_docs(path("b.h5"), random_docs(3, 5, 300, 1), 300, 0, 8);
  std::string msg = error_of([&] { TokenDataset::open({path("a.h5"), path("b.h5")}); });
  EXPECT_NE(msg.find("b.h5: vocab_size 300 differs from 257"), std::string::npos) << msg;
  // The tokenizer: by its file's hash where both record one (a copy elsewhere agrees).
  auto with = [&](const std::string& name, const std::string& tok, const std::string& sha) {
    TokenWriterOptions o;
    o.vocab_size = 257;
    o.eos_id = 256;
    o.tokenizer = tok;
    o.tokenizer_sha256 = sha;
    TokenWriter w(path(name), o);
    const int32_t d[2] = {1, 256};
    w.add_document(d, 2);
    w.close();
    return path(name);
  };
  const std::string x = with("x.h5", "hf:/one/tokenizer.json", "ab12"), y = with("y.h5", "hf:/two/tokenizer.json", "ab12");
  EXPECT_EQ(TokenDataset::open({x, y}).tokenizer_sha256(), "ab12");
  const std::string z = with("z.h5", "hf:/one/tokenizer.json", "cd34");
  msg = error_of([&] { TokenDataset::open({x, z}); });
  EXPECT_EQ(msg, z + ": tokenizer 'hf:/one/tokenizer.json' (sha256 cd34) differs from 'hf:/one/tokenizer.json' "
                     "(sha256 ab12) in " + x + " (the files of a dataset, and the sources of a mixture, must agree)");
  msg = error_of([&] { TokenDataset::open({path("a.h5"), x}); });
  EXPECT_NE(msg.find(x + ": tokenizer 'hf:/one/tokenizer.json' (sha256 ab12) differs from 'test'"), std::string::npos)
      << msg;
}

TEST_F(DatasetTest, ReadRanges) {
  Docs docs = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {}, {11, 12}};
  write_docs(path("r.h5"), docs, 257, 0, 4);
  TokenDataset ds = TokenDataset::open({path("r.h5")});
  std::vector<int32_t> out(10, -1);
  ds.read(0, 3, 5, out.data());
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 5),
            (std::vector<int32_t>{4, 5, 6, 7, 8}));
  ds.read(2, 1, 1, out.data());
  EXPECT_EQ(out[0], 12);
  ds.read(1, 0, 0, out.data());  // empty document, empty read
  EXPECT_EQ(ds.doc_length(1), 0);
  EXPECT_THROW(ds.read(0, 8, 3, out.data()), Error);
  EXPECT_THROW(ds.read(0, -1, 1, out.data()), Error);
  EXPECT_THROW(ds.read(3, 0, 1, out.data()), Error);
  EXPECT_THROW(ds.doc_length(-1), Error);
}

TEST_F(DatasetTest, WriterStreamsChunksToDisk) {
  // 4 M tokens in 1024-token chunks: the temporary file must grow while writing, i.e. the
  // writer hands full chunks to HDF5 instead of holding the corpus.
  std::string p = path("big.h5");
  TokenWriterOptions o;
  o.vocab_size = 257;
  o.eos_id = 256;
  o.tokenizer = "bytes";
  o.chunk_tokens = 1024;
  std::vector<int32_t> doc(1 << 16);
  std::iota(doc.begin(), doc.end(), 0);
  for (auto& t : doc) t %= 256;
  {
    TokenWriter w(p, o);
    for (int i = 0; i < 64; ++i) w.add_document(doc.data(), static_cast<int64_t>(doc.size()));
    std::string tmp = fmt::format("{}.tmp.{}", p, static_cast<long>(::getpid()));
    ASSERT_TRUE(fs::exists(tmp));
    EXPECT_GT(fs::file_size(tmp), size_t(4) << 20);  // most of the 8 MB already on disk
    EXPECT_FALSE(fs::exists(p));
    w.close();
    EXPECT_FALSE(fs::exists(tmp));
  }
  TokenDataset ds = TokenDataset::open({p});
  EXPECT_EQ(ds.num_tokens(), 64 << 16);
  EXPECT_EQ(read_doc(ds, 63), doc);
}

TEST_F(DatasetTest, WriterInPiecesAndAbandoned) {
  TokenWriterOptions o;
  o.vocab_size = 257;
  o.eos_id = 256;
  o.tokenizer = "bytes";
  o.chunk_tokens = 3;
  {
    TokenWriter w(path("p.h5"), o);
    int32_t a[] = {1, 2}, b[] = {3, 4, 5};
    w.append(a, 2);
    w.append(b, 3);
    w.end_document();
    w.close();
  }
  TokenDataset ds = TokenDataset::open({path("p.h5")});
  EXPECT_EQ(read_doc(ds, 0), (std::vector<int32_t>{1, 2, 3, 4, 5}));

  // A bad token aborts the write; nothing is left behind.
  {
    TokenWriter w(path("bad.h5"), o);
    int32_t bad[] = {1, 257};
    std::string msg = error_of([&] { w.add_document(bad, 2); });
    EXPECT_NE(msg.find("token 257 at position 1 of document 0"), std::string::npos) << msg;
  }
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename(), "p.h5") << "left behind: " << e.path();
  EXPECT_THROW(TokenWriter(path("x.h5"), TokenWriterOptions{}), Error);  // vocab 0
  o.compression = 10;
  EXPECT_THROW(TokenWriter(path("x.h5"), o), Error);
  o.compression = 0;
  EXPECT_THROW(TokenWriter(path("no/such/dir/x.h5"), o), Error);
}

TEST_F(DatasetTest, RawFileIsValid) {
  RawFile r;
  r.write(path("ok.h5"));
  TokenDataset ds = TokenDataset::open({path("ok.h5")});
  ds.validate();
  EXPECT_EQ(read_doc(ds, 1), (std::vector<int32_t>{4, 5, 256}));
  r.chunked = false;  // contiguous storage is read too
  r.token_type = H5T_STD_I32LE;
  r.write(path("contig.h5"));
  TokenDataset::open({path("contig.h5")}).validate();
}

TEST_F(DatasetTest, ValidateCatchesEveryDefect) {
  struct Case {
    const char* name;
    std::function<void(RawFile&)> breakit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"no_tokens", [](RawFile& r) { r.has_tokens = false; }, "dataset '/tokens' is missing"},
      {"no_offsets", [](RawFile& r) { r.has_offsets = false; }, "dataset '/offsets' is missing"},
      {"no_schema", [](RawFile& r) { r.schema = ""; }, "root attribute 'schema' is missing"},
      {"bad_schema", [](RawFile& r) { r.schema = "flexsp.checkpoint"; },
       "schema is 'flexsp.checkpoint'"},
      {"version", [](RawFile& r) { r.version = 2; }, "schema_version 2 is not supported"},
      {"eos", [](RawFile& r) { r.eos = 257; }, "eos_id = 257 is outside"},
      {"vocab", [](RawFile& r) { r.vocab = 0; }, "vocab_size = 0"},
      {"float_tokens", [](RawFile& r) { r.token_type = H5T_IEEE_F32LE; },
       "/tokens has dtype float32"},
      {"int64_tokens", [](RawFile& r) { r.token_type = H5T_STD_I64LE; }, "/tokens has dtype int64"},
      {"two_d", [](RawFile& r) { r.two_d = true; }, "'/tokens' must be one-dimensional"},
      {"offsets_empty", [](RawFile& r) { r.offsets = {}; }, "/offsets is empty"},
      {"offsets_start",
       [](RawFile& r) {
         r.offsets = {1, 4, 7};
       },
       "/offsets[0] = 1 (must be 0)"},
      {"offsets_decrease",
       [](RawFile& r) {
         r.offsets = {0, 5, 3, 7};
       },
       "/offsets[2] = 3 < /offsets[1] = 5 (offsets must be nondecreasing)"},
      {"offsets_end",
       [](RawFile& r) {
         r.offsets = {0, 4, 6};
       },
       "/offsets[2] = 6 but /tokens has 7 tokens"},
      {"token_high", [](RawFile& r) { r.tokens[5] = 300; },
       "/tokens[5] = 300 is outside [0, vocab_size = 257)"},
      {"token_vocab",
       [](RawFile& r) {
         r.vocab = 100;
         r.eos = 99;
         r.tokens[3] = 100;
       },
       "/tokens[3] = 100 is outside [0, vocab_size = 100)"},
      {"token_negative",
       [](RawFile& r) {
         r.token_type = H5T_STD_I32LE;
         r.tokens[0] = -5;
       },
       "/tokens[0] = -5 is outside"},
      {"no_documents",
       [](RawFile& r) {
         r.tokens = {};
         r.offsets = {0};
       },
       "dataset has no documents"},
  };
  for (const Case& c : cases) {
    RawFile r;
    c.breakit(r);
    std::string p = path(std::string(c.name) + ".h5");
    r.write(p);
    std::string msg = error_of([&] { TokenDataset::open({p}).validate(); });
    EXPECT_NE(msg.find(p), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name << ": " << msg;
  }
  // Not a dataset at all.
  std::ofstream(path("text.h5")) << "hello";
  EXPECT_EQ(error_of([&] { TokenDataset::open({path("text.h5")}); }),
            path("text.h5") + ": not an HDF5 file");
  EXPECT_EQ(error_of([&] { TokenDataset::open({path("missing.h5")}); }),
            path("missing.h5") + ": no such file");
}

TEST_F(DatasetTest, ValidateScansLargeFilesInBlocks) {
  // More tokens than one scan block (4 M), so the block loop and its edges are exercised;
  // the bad token sits in the last, partial block.
  std::string p = path("scan.h5");
  TokenWriterOptions o;
  o.vocab_size = 300;
  o.eos_id = 299;
  o.tokenizer = "t";
  o.chunk_tokens = 1 << 16;
  std::vector<int32_t> doc(1 << 20, 7);
  {
    TokenWriter w(p, o);
    for (int i = 0; i < 5; ++i) w.add_document(doc.data(), static_cast<int64_t>(doc.size()));
    w.close();
  }
  TokenDataset::open({p}).validate();
  {
    h5::Id f = h5::open_file(p, true);
    h5::Id d = h5::open_dataset(f.get(), "/tokens");
    h5::Id space = h5::space_id(H5Dget_space(d.get()));
    hsize_t at = (5 << 20) - 2, one = 1;
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &at, nullptr, &one, nullptr);
    h5::Id mem = h5::space_id(H5Screate_simple(1, &one, nullptr));
    int32_t bad = 299 + 1000;
    ASSERT_GE(H5Dwrite(d.get(), H5T_NATIVE_INT32, mem.get(), space.get(), H5P_DEFAULT, &bad), 0);
  }
  std::string msg = error_of([&] { TokenDataset::open({p}).validate(); });
  EXPECT_NE(msg.find(fmt::format("/tokens[{}] = 1299", (5 << 20) - 2)), std::string::npos) << msg;
}

TEST_F(DatasetTest, ExpandDataPath) {
  for (const char* n : {"b.h5", "a.h5", "c.h5", "x.txt"}) std::ofstream(path(n)) << "";
  auto v = expand_data_path(path("*.h5"));
  EXPECT_EQ(v, (std::vector<std::string>{path("a.h5"), path("b.h5"), path("c.h5")}));
  v = expand_data_path(path("c.h5") + " , " + path("[ab].h5"));
  EXPECT_EQ(v, (std::vector<std::string>{path("c.h5"), path("a.h5"), path("b.h5")}));
  EXPECT_EQ(error_of([&] { expand_data_path(path("nope.h5")); }),
            fmt::format("data.path: file '{}' not found", path("nope.h5")));
  EXPECT_EQ(error_of([&] { expand_data_path(path("*.nope")); }),
            fmt::format("data.path: pattern '{}' matches no file", path("*.nope")));
  EXPECT_THROW(expand_data_path(" , "), Error);
}
