// Token datasets: reader, validator and streaming writer (docs/datasets.md; the header
// has the API).
//
// Reader: every file stays open with its /tokens handle; its offsets live in memory, so a
// document's length is an array lookup and a read is one hyperslab H5Dread converting the
// stored uint16/int32 to int32. Opening checks everything that is cheap once the offsets
// are in memory (attributes, shapes, dtypes, offsets), so read() can trust the offsets;
// validate() adds the one expensive check, every token < vocab_size, scanning /tokens in
// chunk-aligned blocks of bounded size.
// Writer: /tokens and /offsets are extendible chunked datasets filled from one chunk-sized
// buffer each, written whenever a buffer fills, so memory stays O(chunk) for any corpus.
// It writes "<path>.tmp.<pid>" and renames on close(), so readers never see a partial file.
#include "io/dataset/token_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <system_error>

#include "io/hdf5/h5.h"
#include "io/util/atomic_file.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr const char* kSchema = "flexsp.tokens";
constexpr int64_t kSchemaVersion = 1;
constexpr int64_t kOffsetChunk = 1 << 14;  // int64 entries per /offsets chunk
constexpr int64_t kScanBlock = 1 << 22;    // tokens per validate() read (16 MB int32)
constexpr size_t kMaxChunkCache = size_t(64) << 20;

// The offsets invariants of docs/datasets.md; messages name the file and the first bad
// index.
void check_offsets(const std::string& path, const std::vector<int64_t>& off, int64_t n_tokens) {
  FLEXSP_CHECK(!off.empty(), "{}: /offsets is empty (it must hold D+1 entries, the first 0)", path);
  FLEXSP_CHECK(off[0] == 0, "{}: /offsets[0] = {} (must be 0)", path, off[0]);
  for (size_t i = 1; i < off.size(); ++i)
    FLEXSP_CHECK(off[i] >= off[i - 1],
                 "{}: /offsets[{}] = {} < /offsets[{}] = {} (offsets must be nondecreasing)", path,
                 i, off[i], i - 1, off[i - 1]);
  FLEXSP_CHECK(off.back() == n_tokens,
               "{}: /offsets[{}] = {} but /tokens has {} tokens (the last offset must equal "
               "len(tokens))",
               path, off.size() - 1, off.back(), n_tokens);
}

// Integer types whose every value fits int32 (the memory type all reads convert to).
bool fits_int32(hid_t dtype) {
  if (H5Tget_class(dtype) != H5T_INTEGER) return false;
  size_t n = H5Tget_size(dtype);
  return n < 4 || (n == 4 && H5Tget_sign(dtype) != H5T_SGN_NONE);
}

}  // namespace

// ---- reader ------------------------------------------------------------------------------

namespace {

// What a file's ids mean: the attributes the files of a dataset must agree on.
struct Meaning {
  int vocab = 0, eos = 0;
  std::string tokenizer, sha256;  // sha256: of the tokenizer's file ("" when not recorded)
};

// One open file of a dataset.
struct File {
  std::string path;
  h5::Id file, tokens;
  int64_t n_tokens = 0;
  int64_t chunk = 0;  // tokens per chunk (0: contiguous)
  std::vector<int64_t> offsets;
  Meaning meaning;
};

// The tokenizer as a message shows it: its name, and its file's hash when recorded.
std::string tokenizer_text(const Meaning& m) {
  return m.sha256.empty() ? fmt::format("'{}'", m.tokenizer)
                          : fmt::format("'{}' (sha256 {})", m.tokenizer, m.sha256.substr(0, 12));
}

// Files of one dataset (or of the sources of a mixture) must agree on what their ids
// mean. The same tokenizer file may sit at another path: where both files recorded its
// hash, the hashes decide.
void check_agree(const File& f, const File& first) {
  const Meaning &a = f.meaning, &b = first.meaning;
  const char* msg = "{}: {} {} differs from {} in {} (the files of a dataset, and the sources of a mixture, "
                    "must agree)";
  const bool same = !a.sha256.empty() && !b.sha256.empty() ? a.sha256 == b.sha256 : a.tokenizer == b.tokenizer;
  FLEXSP_CHECK(same, fmt::runtime(msg), f.path, "tokenizer", tokenizer_text(a), tokenizer_text(b), first.path);
  FLEXSP_CHECK(a.vocab == b.vocab, fmt::runtime(msg), f.path, "vocab_size", a.vocab, b.vocab, first.path);
  FLEXSP_CHECK(a.eos == b.eos, fmt::runtime(msg), f.path, "eos_id", a.eos, b.eos, first.path);
}

}  // namespace

struct TokenDataset::Impl {
  std::vector<std::string> paths;
  std::vector<File> files;
  std::vector<int64_t> first_doc;  // global index of each file's first document; + total
  int64_t n_tokens = 0;
  const Meaning& meaning() const { return files.front().meaning; }

  int64_t n_docs() const { return first_doc.back(); }

  // The file holding global document doc, and its index inside that file.
  const File& locate(int64_t doc, int64_t* local) const {
    FLEXSP_CHECK(doc >= 0 && doc < n_docs(), "dataset {}: document {} out of range [0, {})",
                 paths.front(), doc, n_docs());
    size_t f = static_cast<size_t>(std::upper_bound(first_doc.begin(), first_doc.end(), doc) -
                                   first_doc.begin() - 1);
    *local = doc - first_doc[f];
    return files[f];
  }
};

namespace {

// Reads tokens [begin, begin + n) of one file into out (int32).
void read_tokens(const File& f, int64_t begin, int64_t n, int32_t* out) {
  if (n == 0) return;
  h5::Quiet q;
  auto what = [&] {
    return fmt::format("{}: cannot read /tokens[{}:{}]", f.path, begin, begin + n);
  };
  h5::Id fspace = h5::space_id(h5::check(H5Dget_space(f.tokens.get()), what()));
  hsize_t start = static_cast<hsize_t>(begin), count = static_cast<hsize_t>(n);
  h5::check_status(
      H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), what());
  h5::Id mspace = h5::space_id(h5::check(H5Screate_simple(1, &count, nullptr), what()));
  h5::check_status(
      H5Dread(f.tokens.get(), H5T_NATIVE_INT32, mspace.get(), fspace.get(), H5P_DEFAULT, out),
      what());
}

h5::Id open_int_dataset(const File& f, const char* name, bool int32_only, hid_t dapl) {
  h5::Id d = h5::open_dataset(f.file.get(), name, dapl);
  h5::Id t = h5::type_id(h5::check(H5Dget_type(d.get()), fmt::format("{}: {}", f.path, name)));
  if (int32_only)
    FLEXSP_CHECK(fits_int32(t.get()), "{}: {} has dtype {} (expected uint16 or int32)", f.path,
                 name, h5::type_name(t.get()));
  else
    FLEXSP_CHECK(H5Tget_class(t.get()) == H5T_INTEGER, "{}: {} has dtype {} (expected int64)",
                 f.path, name, h5::type_name(t.get()));
  return d;
}

// Opens one file: attributes, /tokens, /offsets (read whole and checked).
File open_one(const std::string& path) {
  h5::Quiet q;
  File f;
  f.path = path;
  f.file = h5::open_file(path);
  hid_t root = f.file.get();
  FLEXSP_CHECK(h5::has_attr(root, "schema"),
               "{}: not a flexsp token dataset (root attribute 'schema' is missing)", path);
  std::string schema = h5::read_attr_string(root, "schema");
  FLEXSP_CHECK(schema == kSchema, "{}: schema is '{}', not a token dataset ('{}')", path, schema,
               kSchema);
  int64_t version = h5::read_attr_int(root, "schema_version");
  FLEXSP_CHECK(version == kSchemaVersion,
               "{}: schema_version {} is not supported (this flexsp reads {})", path, version,
               kSchemaVersion);
  int64_t v = h5::read_attr_int(root, "vocab_size");
  FLEXSP_CHECK(v > 0 && v <= std::numeric_limits<int32_t>::max(),
               "{}: vocab_size = {} (must be in [1, 2^31))", path, v);
  int64_t e = h5::read_attr_int(root, "eos_id");
  FLEXSP_CHECK(e >= 0 && e < v, "{}: eos_id = {} is outside [0, vocab_size = {})", path, e, v);
  f.meaning.vocab = static_cast<int>(v);
  f.meaning.eos = static_cast<int>(e);
  f.meaning.tokenizer = h5::read_attr_string(root, "tokenizer");
  if (h5::has_attr(root, "tokenizer_sha256")) f.meaning.sha256 = h5::read_attr_string(root, "tokenizer_sha256");

  f.tokens = open_int_dataset(f, "/tokens", true, H5P_DEFAULT);
  f.n_tokens = h5::extent_1d(f.tokens.get(), "/tokens");
  h5::Id dcpl = h5::plist_id(H5Dget_create_plist(f.tokens.get()));
  if (dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    hsize_t dim = 0;
    if (H5Pget_chunk(dcpl.get(), 1, &dim) == 1) f.chunk = static_cast<int64_t>(dim);
    // A compressed chunk is decompressed whole; let the cache keep one, so consecutive
    // small documents do not decompress the same chunk again (HDF5's default is 1 MB).
    size_t bytes = static_cast<size_t>(f.chunk) * sizeof(int32_t);
    if (H5Pget_nfilters(dcpl.get()) > 0 && bytes > (size_t(1) << 20)) {
      h5::Id dapl = h5::plist_id(h5::check(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate"));
      H5Pset_chunk_cache(dapl.get(), 521, std::min(2 * bytes, kMaxChunkCache), 1.0);
      f.tokens = open_int_dataset(f, "/tokens", true, dapl.get());
    }
  }

  h5::Id off = open_int_dataset(f, "/offsets", false, H5P_DEFAULT);
  int64_t n_off = h5::extent_1d(off.get(), "/offsets");
  f.offsets.resize(static_cast<size_t>(n_off));
  if (n_off > 0)
    h5::check_status(
        H5Dread(off.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.offsets.data()),
        fmt::format("{}: cannot read /offsets", path));
  check_offsets(path, f.offsets, f.n_tokens);
  return f;
}

}  // namespace

TokenDataset::TokenDataset(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;
TokenDataset::~TokenDataset() = default;

TokenDataset TokenDataset::open(const std::vector<std::string>& paths) {
  FLEXSP_CHECK(!paths.empty(), "no dataset files given");
  auto impl = std::make_unique<Impl>();
  impl->paths = paths;
  impl->first_doc.push_back(0);
  for (size_t i = 0; i < paths.size(); ++i) {
    File f = open_one(paths[i]);
    if (i > 0) check_agree(f, impl->files.front());
    impl->first_doc.push_back(impl->first_doc.back() + static_cast<int64_t>(f.offsets.size()) - 1);
    impl->n_tokens += f.n_tokens;
    impl->files.push_back(std::move(f));
  }
  return TokenDataset(std::move(impl));
}

int64_t TokenDataset::num_docs() const { return impl_->n_docs(); }
int64_t TokenDataset::num_tokens() const { return impl_->n_tokens; }
int TokenDataset::vocab_size() const { return impl_->meaning().vocab; }
int TokenDataset::eos_id() const { return impl_->meaning().eos; }
const std::string& TokenDataset::tokenizer() const { return impl_->meaning().tokenizer; }
const std::string& TokenDataset::tokenizer_sha256() const { return impl_->meaning().sha256; }
int64_t TokenDataset::first_doc_of_file(size_t i) const { return impl_->first_doc.at(i); }
const std::vector<std::string>& TokenDataset::files() const { return impl_->paths; }

int64_t TokenDataset::doc_length(int64_t doc) const {
  int64_t i = 0;
  const File& f = impl_->locate(doc, &i);
  return f.offsets[static_cast<size_t>(i) + 1] - f.offsets[static_cast<size_t>(i)];
}

void TokenDataset::read(int64_t doc, int64_t start, int64_t count, int32_t* out) const {
  int64_t i = 0;
  const File& f = impl_->locate(doc, &i);
  int64_t begin = f.offsets[static_cast<size_t>(i)];
  int64_t len = f.offsets[static_cast<size_t>(i) + 1] - begin;
  FLEXSP_CHECK(start >= 0 && count >= 0 && start <= len && count <= len - start,
               "{}: tokens [{}, {}) are outside document {} (length {})", f.path, start,
               start + count, doc, len);
  read_tokens(f, begin + start, count, out);
}

void TokenDataset::validate() const {
  const Impl& d = *impl_;
  FLEXSP_CHECK(d.n_docs() > 0, "{}: dataset has no documents (/offsets = [0])",
               d.paths.size() == 1
                   ? d.paths[0]
                   : fmt::format("{} (and {} more files)", d.paths[0], d.paths.size() - 1));
  std::vector<int32_t> buf;
  for (const File& f : d.files) {
    check_offsets(f.path, f.offsets, f.n_tokens);
    // Whole chunks per read: each chunk is fetched (and decompressed) exactly once.
    int64_t block = kScanBlock;
    if (f.chunk > 0) block = std::max<int64_t>(1, kScanBlock / f.chunk) * f.chunk;
    block = std::min(block, f.n_tokens);
    buf.resize(static_cast<size_t>(std::max<int64_t>(block, 1)));
    for (int64_t at = 0; at < f.n_tokens; at += block) {
      int64_t n = std::min(block, f.n_tokens - at);
      read_tokens(f, at, n, buf.data());
      const uint32_t limit = static_cast<uint32_t>(d.meaning().vocab);
      for (int64_t j = 0; j < n; ++j) {
        // One unsigned compare catches negative ids too.
        if (static_cast<uint32_t>(buf[static_cast<size_t>(j)]) >= limit)
          fail(fmt::format("{}: /tokens[{}] = {} is outside [0, vocab_size = {})", f.path, at + j,
                           buf[static_cast<size_t>(j)], d.meaning().vocab));
      }
    }
  }
}

// ---- writer ----------------------------------------------------------------------------------

struct TokenWriter::Impl {
  std::string path, tmp;
  TokenWriterOptions opts;
  h5::NewFile file;
  h5::Id tokens, offsets;
  std::vector<int32_t> tok_buf;  // pending tokens, at most chunk_tokens
  std::vector<int64_t> off_buf;  // pending offsets, at most kOffsetChunk
  int64_t tok_written = 0, off_written = 0;
  int64_t n_docs = 0, n_tokens = 0, doc_start = 0;
  bool closed = false;

  // Not closed (abandoned, a write failed, or the constructor threw after creating the
  // file): the temporary file goes.
  ~Impl() {
    if (closed || tmp.empty()) return;
    file.discard({&tokens, &offsets});
  }

  // Grows a 1-D dataset by n elements and writes buf there.
  void append(hid_t ds, int64_t* written, hid_t memtype, const void* buf, int64_t n,
              const char* name) {
    if (n == 0) return;
    h5::Quiet q;
    auto what = [&] { return fmt::format("{}: cannot write {}", path, name); };
    // Room for these elements as stored (uncompressed: a bound) and HDF5's metadata.
    h5::Id ftype = h5::type_id(h5::check(H5Dget_type(ds), what()));
    check_room(path, static_cast<uint64_t>(n) * H5Tget_size(ftype.get()) + (1u << 20), std::string(name));
    hsize_t start = static_cast<hsize_t>(*written), count = static_cast<hsize_t>(n);
    hsize_t total = start + count;
    h5::check_status(H5Dset_extent(ds, &total), what());
    h5::Id fspace = h5::space_id(h5::check(H5Dget_space(ds), what()));
    h5::check_status(
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
        what());
    h5::Id mspace = h5::space_id(h5::check(H5Screate_simple(1, &count, nullptr), what()));
    const herr_t st = H5Dwrite(ds, memtype, mspace.get(), fspace.get(), H5P_DEFAULT, buf);
    file.check_written(path);  // before HDF5's own error: a failed write is its cause
    h5::check_status(st, what());
    *written += n;
  }
  void flush_tokens() {
    append(tokens.get(), &tok_written, H5T_NATIVE_INT32, tok_buf.data(),
           static_cast<int64_t>(tok_buf.size()), "/tokens");
    tok_buf.clear();
  }
  void flush_offsets() {
    append(offsets.get(), &off_written, H5T_NATIVE_INT64, off_buf.data(),
           static_cast<int64_t>(off_buf.size()), "/offsets");
    off_buf.clear();
  }
};

namespace {

h5::Id create_1d(hid_t file, const char* name, hid_t type, int64_t chunk, int level,
                 const std::string& path) {
  h5::Quiet q;
  hsize_t dim = 0, maxdim = H5S_UNLIMITED, cdim = static_cast<hsize_t>(chunk);
  std::string what = fmt::format("{}: cannot create {}", path, name);
  h5::Id space = h5::space_id(h5::check(H5Screate_simple(1, &dim, &maxdim), what));
  h5::Id dcpl = h5::plist_id(h5::check(H5Pcreate(H5P_DATASET_CREATE), what));
  h5::check_status(H5Pset_obj_track_times(dcpl.get(), false), what);  // same corpus, same bytes
  h5::check_status(H5Pset_chunk(dcpl.get(), 1, &cdim), what);
  if (level > 0) {
    // Shuffle groups the high bytes of the ids together; deflate then compresses better.
    h5::check_status(H5Pset_shuffle(dcpl.get()), what);
    h5::check_status(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(level)), what);
  }
  return h5::dataset_id(h5::check(
      H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), what));
}

}  // namespace

TokenWriter::TokenWriter(const std::string& path, const TokenWriterOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  FLEXSP_CHECK(opts.vocab_size > 0, "{}: vocab_size = {} (must be positive)", path,
               opts.vocab_size);
  FLEXSP_CHECK(opts.eos_id >= 0 && opts.eos_id < opts.vocab_size,
               "{}: eos_id = {} is outside [0, vocab_size = {})", path, opts.eos_id,
               opts.vocab_size);
  FLEXSP_CHECK(opts.compression >= 0 && opts.compression <= 9,
               "{}: compression level {} is outside 0..9", path, opts.compression);
  FLEXSP_CHECK(opts.chunk_tokens > 0 && opts.chunk_tokens <= (int64_t(1) << 28),
               "{}: chunk_tokens = {} is outside [1, 2^28]", path, opts.chunk_tokens);
  FLEXSP_CHECK(opts.compression == 0 || H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0,
               "{}: this HDF5 library has no gzip (deflate) filter; use compression 0", path);
  w.path = path;
  w.tmp = temp_path(path);
  w.opts = opts;
  {
    h5::Quiet q;
    h5::Id fcpl = h5::plist_id(h5::check(H5Pcreate(H5P_FILE_CREATE), path));
    h5::check_status(H5Pset_obj_track_times(fcpl.get(), false), path);
    w.file = h5::create_file(w.tmp, H5P_DEFAULT, fcpl.get());
  }
  hid_t root = w.file.get();
  hid_t ttype = opts.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_I32LE;
  w.tokens = create_1d(root, "/tokens", ttype, opts.chunk_tokens, opts.compression, path);
  w.offsets = create_1d(root, "/offsets", H5T_STD_I64LE, kOffsetChunk, opts.compression, path);
  h5::write_attr(root, "schema", kSchema);
  h5::write_attr(root, "schema_version", kSchemaVersion);
  h5::write_attr(root, "vocab_size", opts.vocab_size);
  h5::write_attr(root, "eos_id", opts.eos_id);
  h5::write_attr(root, "tokenizer", opts.tokenizer);
  if (!opts.tokenizer_sha256.empty()) h5::write_attr(root, "tokenizer_sha256", opts.tokenizer_sha256);
  if (opts.bos_id >= 0) h5::write_attr(root, "bos_id", opts.bos_id);
  w.tok_buf.reserve(static_cast<size_t>(opts.chunk_tokens));
  w.off_buf.reserve(static_cast<size_t>(kOffsetChunk));
  w.off_buf.push_back(0);
}

TokenWriter::~TokenWriter() = default;

void TokenWriter::append(const int32_t* tokens, int64_t n) {
  Impl& w = *impl_;
  FLEXSP_ASSERT(!w.closed && n >= 0);
  const uint32_t limit = static_cast<uint32_t>(w.opts.vocab_size);
  const size_t cap = static_cast<size_t>(w.opts.chunk_tokens);
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<uint32_t>(tokens[i]) >= limit)
      fail(
          fmt::format("{}: token {} at position {} of document {} is outside [0, vocab_size "
                      "= {})",
                      w.path, tokens[i], w.n_tokens - w.doc_start, w.n_docs, limit));
    w.tok_buf.push_back(tokens[i]);
    ++w.n_tokens;
    if (w.tok_buf.size() == cap) w.flush_tokens();
  }
}

void TokenWriter::end_document() {
  Impl& w = *impl_;
  FLEXSP_ASSERT(!w.closed);
  w.off_buf.push_back(w.n_tokens);
  ++w.n_docs;
  w.doc_start = w.n_tokens;
  if (static_cast<int64_t>(w.off_buf.size()) == kOffsetChunk) w.flush_offsets();
}

void TokenWriter::add_document(const int32_t* tokens, int64_t n) {
  FLEXSP_ASSERT(impl_->doc_start == impl_->n_tokens);  // no document half-appended
  append(tokens, n);
  end_document();
}

void TokenWriter::close() {
  Impl& w = *impl_;
  if (w.closed) return;
  FLEXSP_CHECK(w.doc_start == w.n_tokens, "{}: {} tokens appended after the last end_document()",
               w.path, w.n_tokens - w.doc_start);
  w.flush_tokens();
  w.flush_offsets();
  // The datasets' cached chunks go out here; a write that fails shows at the file's close
  // (a failure leaves the file for ~Impl to discard).
  const herr_t tok = w.tokens.close(), off = w.offsets.close();
  w.file.close_or_throw(w.path);
  h5::check_status(std::min(tok, off), fmt::format("{}: cannot close /tokens and /offsets", w.path));
  publish_file(w.tmp, w.path);
  w.closed = true;
}

int64_t TokenWriter::num_docs() const { return impl_->n_docs; }
int64_t TokenWriter::num_tokens() const { return impl_->n_tokens; }

}  // namespace flexsp
