// Packing (see pack.h): the inputs in order, cut into items (packer.h), read by one process
// into the dataset writer, or by every rank into its own part and joined in order.
//
// In parallel the items are dealt out in contiguous runs of about equal bytes (JSON lines
// files are first cut into line-aligned ranges, so one big file spreads over the ranks
// too). Rank 0 writes its run straight into the dataset; every other rank writes its
// documents to a part beside the output (tokens and document lengths, raw int32 / int64),
// which rank 0 then appends in rank order. The writer sees the very sequence of tokens and
// document ends a one-process pack gives it, and its chunking does not depend on how the
// appends are cut, so the file is the same byte for byte. Parts go when the pack ends,
// however it ends; every phase is agreed, so bad input on any rank ends all with one line
// and no output.
#include "io/pack/pack.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "io/dataset/token_dataset.h"
#include "io/pack/packer.h"
#include "io/tokenizer/tokenizer.h"
#include "io/util/atomic_file.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace fs = std::filesystem;

namespace flexsp {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr size_t kPartBuffer = size_t(1) << 20;  // int32 tokens buffered per part write

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  bool r = fs::equivalent(a, b, ec);
  return !ec && r;
}

class WriterSink final : public TokenSink {
 public:
  explicit WriterSink(TokenWriter& w) : w_(w) {}
  void append(const int32_t* ids, int64_t n) override { w_.append(ids, n); }
  void end_document() override { w_.end_document(); }

 private:
  TokenWriter& w_;
};

// A rank's documents: <base>.tokens (int32) and <base>.docs (int64 lengths), removed when
// the part goes.
class PartFile final : public TokenSink {
 public:
  explicit PartFile(std::string base) : base_(std::move(base)) {
    tokens_ = open(tokens_path(base_));
    docs_ = open(docs_path(base_));
    buf_.reserve(kPartBuffer);
  }
  ~PartFile() override {
    for (std::FILE* f : {tokens_, docs_})
      if (f) std::fclose(f);
    std::remove(tokens_path(base_).c_str());
    std::remove(docs_path(base_).c_str());
  }
  void append(const int32_t* ids, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      buf_.push_back(ids[i]);
      if (buf_.size() == kPartBuffer) flush();
    }
    doc_len_ += n;
  }
  void end_document() override {
    lens_.push_back(doc_len_);
    doc_len_ = 0;
    if (lens_.size() == kPartBuffer) flush();
  }
  void close() {
    flush();
    for (std::FILE** f : {&tokens_, &docs_}) {
      const bool ok = std::fclose(*f) == 0;
      *f = nullptr;
      FLEXSP_CHECK(ok, "{}: cannot write a pack part ({})", base_, std::strerror(errno));
    }
  }
  static std::string tokens_path(const std::string& base) { return base + ".tokens"; }
  static std::string docs_path(const std::string& base) { return base + ".docs"; }

 private:
  static std::FILE* open(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    FLEXSP_CHECK(f != nullptr, "{}: cannot create a pack part ({})", path, std::strerror(errno));
    return f;
  }
  void write(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
    if (bytes == 0) return;
    check_room(path, bytes, "a pack part");
    FLEXSP_CHECK(std::fwrite(data, 1, bytes, f) == bytes, "{}: cannot write ({})", path, std::strerror(errno));
  }
  void flush() {
    write(tokens_, buf_.data(), buf_.size() * sizeof(int32_t), tokens_path(base_));
    write(docs_, lens_.data(), lens_.size() * sizeof(int64_t), docs_path(base_));
    buf_.clear();
    lens_.clear();
  }
  std::string base_;
  std::FILE* tokens_ = nullptr;
  std::FILE* docs_ = nullptr;
  std::vector<int32_t> buf_;
  std::vector<int64_t> lens_;
  int64_t doc_len_ = 0;
};

// Appends the documents of a part to the writer, in order.
void join_part(const std::string& base, TokenWriter& w) {
  using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
  auto open = [](const std::string& p) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    FLEXSP_CHECK(f != nullptr, "{}: cannot open a pack part ({}; do all ranks share this directory?)", p,
                 std::strerror(errno));
    return FilePtr(f, std::fclose);
  };
  const std::string tp = PartFile::tokens_path(base), dp = PartFile::docs_path(base);
  FilePtr tokens = open(tp), docs = open(dp);
  std::vector<int32_t> buf(kPartBuffer);
  int64_t len = 0;
  while (std::fread(&len, sizeof len, 1, docs.get()) == 1) {
    for (int64_t left = len; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf.size())));
      FLEXSP_CHECK(std::fread(buf.data(), sizeof(int32_t), n, tokens.get()) == n, "{}: truncated pack part", tp);
      w.append(buf.data(), static_cast<int64_t>(n));
      left -= static_cast<int64_t>(n);
    }
    w.end_document();
  }
  FLEXSP_CHECK(!std::ferror(docs.get()) && !std::ferror(tokens.get()), "{}: cannot read a pack part", base);
}

// The first byte of the line holding byte `pos` or starting after it: the byte after the
// first '\n' at pos - 1 or later (0 at 0; the file's size when there is none).
int64_t line_start(const std::string& path, int64_t pos, int64_t size) {
  if (pos <= 0 || pos >= size) return std::clamp<int64_t>(pos, 0, size);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  FLEXSP_CHECK(f && std::fseek(f.get(), static_cast<long>(pos - 1), SEEK_SET) == 0, "{}: cannot read ({})", path,
               std::strerror(errno));
  std::vector<char> block(size_t(1) << 16);
  for (int64_t at = pos - 1; at < size;) {
    const size_t got = std::fread(block.data(), 1, block.size(), f.get());
    if (got == 0) break;
    if (const void* nl = std::memchr(block.data(), '\n', got))
      return at + (static_cast<const char*>(nl) - block.data()) + 1;
    at += static_cast<int64_t>(got);
  }
  return size;
}

struct Plan {
  std::vector<std::string> files;
  std::vector<PackItem> items;  // in packing order; JSON lines ranges nominal (see below)
  std::vector<int64_t> sizes;   // bytes of each item
};

// The files, then the items: whole files, and with several ranks each JSON lines file in
// ranges of about total / (8 ranks) bytes (1-64 MB). Ranges are nominal here (byte
// offsets); each is moved to line starts when read, the same way by every rank.
Plan plan_pack(const PackOptions& opts, int ranks) {
  Plan p;
  FLEXSP_CHECK(!opts.out.empty(), "pack: no output file (--out)");
  FLEXSP_CHECK(!opts.inputs.empty(), "pack: no input files or directories given");
  std::error_code ec;
  if (fs::exists(opts.out, ec)) {
    FLEXSP_CHECK(!fs::is_directory(opts.out, ec), "{}: is a directory (--out needs a file name)", opts.out);
    FLEXSP_CHECK(opts.force, "{}: already exists (use --force to overwrite)", opts.out);
  }
  p.files = list_pack_inputs(opts.inputs, opts.glob);
  // With --force the old output may sit inside an input directory; never pack it.
  p.files.erase(std::remove_if(p.files.begin(), p.files.end(),
                               [&](const std::string& f) { return same_file(f, opts.out); }),
                p.files.end());
  FLEXSP_CHECK(!p.files.empty(), "pack: no input files in {}{}", fmt::join(opts.inputs, ", "),
               opts.glob.empty() ? "" : fmt::format(" match '{}'", opts.glob));
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const std::string& f : p.files) {
    const auto n = static_cast<int64_t>(fs::file_size(f, ec));
    bytes.push_back(ec ? 0 : n);
    total += bytes.back();
  }
  const int64_t range = std::clamp<int64_t>(total / (8 * int64_t{ranks}), int64_t(1) << 20, int64_t(64) << 20);
  for (size_t i = 0; i < p.files.size(); ++i) {
    const InputKind kind = input_kind(p.files[i], opts.jsonl);
    if (ranks == 1 || kind != InputKind::jsonl || bytes[i] <= range) {
      p.items.push_back({p.files[i], kind, 0, -1});
      p.sizes.push_back(bytes[i]);
      continue;
    }
    for (int64_t b = 0; b < bytes[i]; b += range) {
      p.items.push_back({p.files[i], kind, b, std::min(b + range, bytes[i])});
      p.sizes.push_back(p.items.back().end - b);
    }
  }
  return p;
}

TokenWriterOptions writer_options(const PackOptions& opts, const Tokenizer& tok) {
  TokenWriterOptions wo;
  wo.vocab_size = tok.vocab_size();
  wo.eos_id = tok.eos_id();
  wo.tokenizer = tok.name();
  wo.tokenizer_sha256 = tok.sha256();
  if (opts.bos) {
    FLEXSP_CHECK(tok.bos_id() >= 0, "pack: --bos: tokenizer {} has no BOS id", tok.name());
    wo.bos_id = tok.bos_id();
  }
  wo.compression = opts.compression;
  wo.chunk_tokens = opts.chunk_tokens != 0 ? opts.chunk_tokens
                    : opts.compression > 0 ? int64_t(1) << 16
                                           : int64_t(1) << 20;
  return wo;
}

// Reads items [first, last) of the plan into the sink; progress on the way.
void read_items(const Plan& plan, size_t first, size_t last, const PackOptions& opts, const Tokenizer& tok,
                TokenSink& sink, PackStats& stats, clock_type::time_point t0) {
  Packer p{tok, sink, stats, static_cast<int32_t>(tok.eos_id()), opts.bos ? tok.bos_id() : -1};
  auto last_report = t0;
  for (size_t i = first; i < last; ++i) {
    PackItem it = plan.items[i];
    if (it.end >= 0) {  // a JSON lines range: to line starts
      const int64_t size = static_cast<int64_t>(fs::file_size(it.path));
      it.begin = line_start(it.path, it.begin, size);
      it.end = line_start(it.path, it.end, size);
      if (it.begin >= it.end) continue;
    }
    p.item(it);
    const auto now = clock_type::now();
    if (opts.progress && std::chrono::duration<double>(now - last_report).count() >= opts.progress_seconds) {
      stats.seconds = std::chrono::duration<double>(now - t0).count();
      opts.progress(stats);
      last_report = now;
    }
  }
}

}  // namespace

std::vector<std::string> list_pack_inputs(const std::vector<std::string>& inputs,
                                          const std::string& glob) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(in, ec);
    FLEXSP_CHECK(fs::exists(st), "{}: no such file or directory", in);
    if (!fs::is_directory(st)) {
      files.push_back(in);  // named explicitly: taken whatever its name
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(in, fs::directory_options::none, ec), end;
    FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
    for (; it != end; it.increment(ec)) {
      FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;  // follows symlinks; skips dangling ones
      std::string name = it->path().filename().string();
      if (!glob.empty() && ::fnmatch(glob.c_str(), name.c_str(), 0) != 0) continue;
      found.push_back(it->path().string());
    }
    FLEXSP_CHECK(!ec, "{}: cannot list directory ({})", in, ec.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

PackStats pack(const PackOptions& opts, const Tokenizer& tok) {
  const auto t0 = clock_type::now();
  const Plan plan = plan_pack(opts, 1);
  TokenWriter writer(opts.out, writer_options(opts, tok));
  WriterSink sink(writer);
  PackStats stats;
  read_items(plan, 0, plan.items.size(), opts, tok, sink, stats, t0);
  FLEXSP_CHECK(stats.documents > 0, "pack: no documents in {} ({} input files, all empty)",
               fmt::join(opts.inputs, ", "), stats.files);
  writer.close();
  stats.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return stats;
}

PackStats pack(const PackOptions& opts, const Tokenizer& tok, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  if (ranks == 1) {
    PackStats s;
    agree(comm, [&] { s = pack(opts, tok); });
    return s;
  }
  const auto t0 = clock_type::now();
  Plan plan;
  agree(comm, [&] { plan = plan_pack(opts, ranks); });
  // This rank's run of items: those whose middle byte falls in its share of the total.
  int64_t total = 0, at = 0;
  for (int64_t s : plan.sizes) total += s;
  size_t first = plan.items.size(), last = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const int64_t mid = at + plan.sizes[i] / 2;
    at += plan.sizes[i];
    const int owner = total > 0 ? static_cast<int>(static_cast<__int128>(mid) * ranks / total)
                                : static_cast<int>(i * static_cast<size_t>(ranks) / plan.items.size());
    if (std::min(owner, ranks - 1) != rank) continue;
    first = std::min(first, i);
    last = i + 1;
  }
  long tag = static_cast<long>(::getpid());  // names the parts after rank 0's process
  MPI_Bcast(&tag, 1, MPI_LONG, 0, comm);
  auto part_base = [&](int r) { return fmt::format("{}.part{}.tmp.{}", opts.out, r, tag); };

  PackStats stats;
  std::unique_ptr<TokenWriter> writer;
  std::unique_ptr<PartFile> part;
  agree(comm, [&] {
    std::unique_ptr<TokenSink> sink;
    if (rank == 0) {
      writer = std::make_unique<TokenWriter>(opts.out, writer_options(opts, tok));
      sink = std::make_unique<WriterSink>(*writer);
    } else {
      writer_options(opts, tok);  // the same checks (--bos) on every rank
      part = std::make_unique<PartFile>(part_base(rank));
    }
    if (first < last) read_items(plan, first, last, opts, tok, sink ? *sink : *part, stats, t0);
    if (part) part->close();
  });
  int64_t counts[5] = {stats.files, stats.documents, stats.tokens, stats.skipped, stats.bytes_read};
  MPI_Allreduce(MPI_IN_PLACE, counts, 5, MPI_INT64_T, MPI_SUM, comm);
  stats.files = counts[0], stats.documents = counts[1], stats.tokens = counts[2];
  stats.skipped = counts[3], stats.bytes_read = counts[4];
  agree(comm, [&] {
    if (rank != 0) return;
    FLEXSP_CHECK(stats.documents > 0, "pack: no documents in {} ({} input files, all empty)",
                 fmt::join(opts.inputs, ", "), stats.files);
    for (int r = 1; r < ranks; ++r) join_part(part_base(r), *writer);
    writer->close();
  });
  stats.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return stats;
}

}  // namespace flexsp
