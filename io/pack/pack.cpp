// Packing (see pack.h): the inputs in order, cut into items (packer.h), read by one process
// into the dataset writer, or by every rank into its own part and joined in order.
//
// In parallel the items (whole files; JSON lines files cut into line-aligned ranges, so
// one big file spreads too) are dealt out one by one to the rank with the fewest bytes so
// far. Every rank writes the documents of its items to a part beside the output (raw
// int32 tokens and int64 document lengths, -1 closing each item); rank 0 then reads the
// items back in their order, each from its owner's part, into the dataset writer. The
// writer sees the very sequence of tokens and document ends a one-process pack gives it,
// and its chunking does not depend on how the appends are cut, so the file is the same
// byte for byte. Parts go when the pack ends, however it ends; every phase is agreed, so
// bad input on any rank ends all with one line and no output.
#include "io/pack/pack.h"

#include <fnmatch.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
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

// This thread's CPU time in seconds (waits for other ranks do not count).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
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

// A rank's documents: <base>.tokens (int32) and <base>.docs (int64 lengths, -1 after each
// item), removed when the part goes.
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
  // After each item this rank read: its documents end with a -1 in the lengths.
  void end_item() { end_document_length(-1); }
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
  void end_document_length(int64_t n) {
    lens_.push_back(n);
    if (lens_.size() == kPartBuffer) flush();
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

// Reads a rank's part back, one item at a time.
class PartReader {
 public:
  explicit PartReader(const std::string& base)
      : tp_(PartFile::tokens_path(base)), tokens_(open(tp_)), docs_(open(PartFile::docs_path(base))),
        buf_(kPartBuffer) {}
  // Appends the documents of the part's next item to the writer.
  void copy_item(TokenWriter& w) {
    int64_t len = 0;
    while (read(&len, sizeof len, 1, docs_.get()) && len >= 0) {
      for (int64_t left = len; left > 0;) {
        const size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf_.size())));
        FLEXSP_CHECK(read(buf_.data(), sizeof(int32_t), n, tokens_.get()), "{}: truncated pack part", tp_);
        w.append(buf_.data(), static_cast<int64_t>(n));
        left -= static_cast<int64_t>(n);
      }
      w.end_document();
    }
    FLEXSP_CHECK(len < 0, "{}: truncated pack part", tp_);
  }

 private:
  using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
  static FilePtr open(const std::string& p) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    FLEXSP_CHECK(f != nullptr, "{}: cannot open a pack part ({}; do all ranks share this directory?)", p,
                 std::strerror(errno));
    return FilePtr(f, std::fclose);
  }
  bool read(void* to, size_t size, size_t n, std::FILE* f) {
    const size_t got = std::fread(to, size, n, f);
    FLEXSP_CHECK(got == n || !std::ferror(f), "{}: cannot read a pack part ({})", tp_, std::strerror(errno));
    return got == n;
  }
  std::string tp_;
  FilePtr tokens_, docs_;
  std::vector<int32_t> buf_;
};

// A JSON lines file of `size` bytes cut into ranges of whole lines, about `range` bytes
// each: every cut moves forward to the start of a line (past the first '\n' at or after
// it), so a line longer than a range makes its range longer and the next ones empty
// (dropped). One pass over the bytes scanned; long lines are scanned once.
std::vector<std::pair<int64_t, int64_t>> line_ranges(const std::string& path, int64_t size, int64_t range) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  FLEXSP_CHECK(f != nullptr, "{}: cannot open ({})", path, std::strerror(errno));
  std::vector<std::pair<int64_t, int64_t>> out;
  std::vector<char> block(size_t(1) << 16);
  int64_t begin = 0;
  while (begin < size) {
    int64_t cut = std::min(begin + range, size);
    if (cut < size) {  // to the byte after the first '\n' at cut - 1 or later
      FLEXSP_CHECK(std::fseek(f.get(), static_cast<long>(cut - 1), SEEK_SET) == 0, "{}: cannot seek", path);
      int64_t at = cut - 1;
      cut = size;
      for (size_t got; (got = std::fread(block.data(), 1, block.size(), f.get())) > 0; at += static_cast<int64_t>(got))
        if (const void* nl = std::memchr(block.data(), '\n', got)) {
          cut = at + (static_cast<const char*>(nl) - block.data()) + 1;
          break;
        }
      FLEXSP_CHECK(!std::ferror(f.get()), "{}: read error ({})", path, std::strerror(errno));
    }
    out.emplace_back(begin, cut);
    begin = cut;
  }
  return out;
}

struct Plan {
  std::vector<std::string> files;
  std::vector<PackItem> items;  // in packing order
  std::vector<int64_t> sizes;   // bytes of each item
};

// The files, then the items: whole files, and with several ranks each JSON lines file in
// ranges of whole lines of about total / (32 ranks) bytes (256 KB - 64 MB).
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
  const int64_t range = std::clamp<int64_t>(total / (32 * int64_t{ranks}), int64_t(256) << 10, int64_t(64) << 20);
  for (size_t i = 0; i < p.files.size(); ++i) {
    const InputKind kind = input_kind(p.files[i], opts.jsonl);
    if (ranks == 1 || kind != InputKind::jsonl || bytes[i] <= range) {
      p.items.push_back({p.files[i], kind, 0, -1});
      p.sizes.push_back(bytes[i]);
      continue;
    }
    for (const auto& [b, e] : line_ranges(p.files[i], bytes[i], range)) {
      p.items.push_back({p.files[i], kind, b, e});
      p.sizes.push_back(e - b);
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

// Reads the plan's items `which` (in order) into the sink, calling after_item after each;
// progress on the way.
void read_items(const Plan& plan, const std::vector<size_t>& which, const PackOptions& opts, const Tokenizer& tok,
                TokenSink& sink, PackStats& stats, clock_type::time_point t0,
                const std::function<void()>& after_item = {}) {
  Packer p{tok, sink, stats, static_cast<int32_t>(tok.eos_id()), opts.bos ? tok.bos_id() : -1};
  auto last_report = t0;
  for (const size_t i : which) {
    p.item(plan.items[i]);
    if (after_item) after_item();
    const auto now = clock_type::now();
    if (opts.progress && std::chrono::duration<double>(now - last_report).count() >= opts.progress_seconds) {
      stats.seconds = std::chrono::duration<double>(now - t0).count();
      opts.progress(stats);
      last_report = now;
    }
  }
}

// Deals the items out: each, in order, to the rank with the fewest bytes so far (ties to
// the lowest), so the ranks' shares are even in bytes and each spans the whole corpus --
// parts of a corpus cost more per byte than others (scripts without spaces, long words).
std::vector<int> deal_items(const Plan& plan, int ranks) {
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[static_cast<size_t>(r)] += std::max<int64_t>(plan.sizes[i], 1);
  }
  return owner;
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
  const double cpu0 = thread_cpu_seconds();
  std::vector<size_t> all(plan.items.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  read_items(plan, all, opts, tok, sink, stats, t0);
  FLEXSP_CHECK(stats.documents > 0, "pack: no documents in {} ({} input files, all empty)",
               fmt::join(opts.inputs, ", "), stats.files);
  writer.close();
  stats.read_cpu_min = stats.read_cpu_max = stats.read_cpu_sum = thread_cpu_seconds() - cpu0;
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
  const std::vector<int> owner = deal_items(plan, ranks);
  std::vector<size_t> mine;
  for (size_t i = 0; i < owner.size(); ++i)
    if (owner[i] == rank) mine.push_back(i);
  long tag = static_cast<long>(::getpid());  // names the parts after rank 0's process
  MPI_Bcast(&tag, 1, MPI_LONG, 0, comm);
  auto part_base = [&](int r) { return fmt::format("{}.part{}.tmp.{}", opts.out, r, tag); };

  PackStats stats;
  std::unique_ptr<PartFile> part;
  agree(comm, [&] {
    writer_options(opts, tok);  // its checks (--bos) on every rank, before any work
    const double cpu0 = thread_cpu_seconds();
    part = std::make_unique<PartFile>(part_base(rank));
    read_items(plan, mine, opts, tok, *part, stats, t0, [&] { part->end_item(); });
    part->close();
    stats.read_cpu_min = thread_cpu_seconds() - cpu0;
  });
  double cpu[3] = {-stats.read_cpu_min, stats.read_cpu_min, stats.read_cpu_min};  // -min, max, sum
  MPI_Allreduce(MPI_IN_PLACE, cpu, 2, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, cpu + 2, 1, MPI_DOUBLE, MPI_SUM, comm);
  stats.read_cpu_min = -cpu[0], stats.read_cpu_max = cpu[1], stats.read_cpu_sum = cpu[2];
  int64_t counts[5] = {stats.files, stats.documents, stats.tokens, stats.skipped, stats.bytes_read};
  MPI_Allreduce(MPI_IN_PLACE, counts, 5, MPI_INT64_T, MPI_SUM, comm);
  stats.files = counts[0], stats.documents = counts[1], stats.tokens = counts[2];
  stats.skipped = counts[3], stats.bytes_read = counts[4];
  // Rank 0 writes the dataset: the items in order, each from its owner's part.
  agree(comm, [&] {
    if (rank != 0) return;
    FLEXSP_CHECK(stats.documents > 0, "pack: no documents in {} ({} input files, all empty)",
                 fmt::join(opts.inputs, ", "), stats.files);
    const double cpu0 = thread_cpu_seconds();
    std::vector<std::unique_ptr<PartReader>> parts;
    for (int r = 0; r < ranks; ++r) parts.push_back(std::make_unique<PartReader>(part_base(r)));
    TokenWriter writer(opts.out, writer_options(opts, tok));
    for (const int r : owner) parts[static_cast<size_t>(r)]->copy_item(writer);
    writer.close();
    stats.join_cpu = thread_cpu_seconds() - cpu0;
  });
  stats.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return stats;
}

}  // namespace flexsp
