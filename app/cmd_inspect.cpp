// flexsp inspect FILE: summary of a flexsp HDF5 file (SPEC §4). A file says what it is by
// its root attribute `schema`; inspect_file() switches on it, with one function per kind.
// Token datasets are described and then fully validated. Checkpoints and reports get their
// branch when their writers exist. Rank 0 does the work inside agree(), so under mpirun a
// bad file ends every rank with one line.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "io/dataset/token_dataset.h"
#include "io/hdf5/h5.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

// How /tokens is stored: dtype, chunk size, filter pipeline, bytes on disk.
struct Storage {
  std::string dtype, compression = "none";
  int64_t chunk = 0, stored_bytes = 0;
};

Storage describe_tokens(const std::string& path) {
  h5::Quiet q;
  Storage s;
  h5::Id f = h5::open_file(path);
  h5::Id d = h5::open_dataset(f.get(), "/tokens");
  h5::Id t = h5::type_id(h5::check(H5Dget_type(d.get()), path + ": /tokens"));
  s.dtype = h5::type_name(t.get());
  s.stored_bytes = static_cast<int64_t>(H5Dget_storage_size(d.get()));
  h5::Id dcpl = h5::plist_id(h5::check(H5Dget_create_plist(d.get()), path + ": /tokens"));
  hsize_t dim = 0;
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED && H5Pget_chunk(dcpl.get(), 1, &dim) == 1)
    s.chunk = static_cast<int64_t>(dim);
  std::string pipeline;
  for (int i = 0, n = H5Pget_nfilters(dcpl.get()); i < n; ++i) {
    unsigned flags = 0, cd[8] = {};
    size_t ncd = 8;
    char name[64] = {};
    H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd,
                                     sizeof name, name, nullptr);
    std::string one = id == H5Z_FILTER_DEFLATE   ? fmt::format("gzip {}", ncd > 0 ? cd[0] : 0)
                      : id == H5Z_FILTER_SHUFFLE ? std::string("shuffle")
                                                 : fmt::format("filter {}", static_cast<int>(id));
    pipeline += (pipeline.empty() ? "" : " + ") + one;
  }
  if (!pipeline.empty()) s.compression = pipeline;
  return s;
}

// Nearest-rank percentile of sorted values.
int64_t percentile(const std::vector<int64_t>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

void inspect_tokens(const std::string& path, bool json) {
  TokenDataset ds = TokenDataset::open({path});
  Storage st = describe_tokens(path);
  std::error_code ec;
  auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));

  std::vector<int64_t> len(static_cast<size_t>(ds.num_docs()));
  for (int64_t i = 0; i < ds.num_docs(); ++i) len[static_cast<size_t>(i)] = ds.doc_length(i);
  std::sort(len.begin(), len.end());

  nlohmann::json j;
  j["file"] = path;
  j["schema"] = "flexsp.tokens";
  j["schema_version"] = 1;
  j["documents"] = ds.num_docs();
  j["tokens"] = ds.num_tokens();
  j["vocab_size"] = ds.vocab_size();
  j["eos_id"] = ds.eos_id();
  j["tokenizer"] = ds.tokenizer();
  j["dtype"] = st.dtype;
  j["chunk_tokens"] = st.chunk;
  j["compression"] = st.compression;
  j["file_bytes"] = file_bytes;
  j["tokens_stored_bytes"] = st.stored_bytes;
  if (!len.empty()) {
    double mean = static_cast<double>(ds.num_tokens()) / static_cast<double>(len.size());
    j["doc_length"] = {{"min", len.front()},         {"mean", mean},
                       {"p50", percentile(len, 50)}, {"p90", percentile(len, 90)},
                       {"p99", percentile(len, 99)}, {"max", len.back()}};
  } else {
    j["doc_length"] = nullptr;
  }

  if (!json) {
    std::printf("file:          %s\n", path.c_str());
    std::printf("schema:        flexsp.tokens (version 1)\n");
    std::printf("documents:     %lld\n", static_cast<long long>(ds.num_docs()));
    std::printf("tokens:        %lld\n", static_cast<long long>(ds.num_tokens()));
    std::printf("vocab_size:    %d\n", ds.vocab_size());
    std::printf("eos_id:        %d\n", ds.eos_id());
    std::printf("tokenizer:     %s\n", ds.tokenizer().c_str());
    std::printf("dtype:         %s\n", st.dtype.c_str());
    if (st.chunk > 0)
      std::printf("chunk:         %lld tokens\n", static_cast<long long>(st.chunk));
    else
      std::printf("chunk:         none (contiguous)\n");
    std::printf("compression:   %s\n", st.compression.c_str());
    std::printf("size:          %.1f MB (/tokens %.2f bytes/token stored)\n", file_bytes / 1e6,
                ds.num_tokens() > 0 ? static_cast<double>(st.stored_bytes) / ds.num_tokens() : 0.0);
    if (!len.empty())
      std::printf("doc length:    min %lld  mean %.1f  p50 %lld  p90 %lld  p99 %lld  max %lld\n",
                  static_cast<long long>(len.front()), j["doc_length"]["mean"].get<double>(),
                  static_cast<long long>(percentile(len, 50)),
                  static_cast<long long>(percentile(len, 90)),
                  static_cast<long long>(percentile(len, 99)), static_cast<long long>(len.back()));
    else
      std::printf("doc length:    n/a (no documents)\n");
    std::fflush(stdout);
  }

  // The summary is out before the full scan, so a broken file still shows what it holds.
  try {
    ds.validate();
  } catch (const Error& e) {
    if (json) {
      j["valid"] = false;
      j["error"] = e.what();
      std::cout << j.dump(2) << std::endl;
    } else {
      std::printf("valid:         no\n");
      std::fflush(stdout);
    }
    throw;
  }
  if (json) {
    j["valid"] = true;
    std::cout << j.dump(2) << std::endl;
  } else {
    std::printf("valid:         yes\n");
    std::fflush(stdout);
  }
}

// The extension point: one branch per schema a flexsp file can carry.
void inspect_file(const std::string& path, bool json) {
  std::string schema;
  {
    h5::Id f = h5::open_file(path);  // names missing / non-HDF5 files
    if (h5::has_attr(f.get(), "schema")) schema = h5::read_attr_string(f.get(), "schema");
  }
  if (schema == "flexsp.tokens") return inspect_tokens(path, json);
  if (schema == "flexsp.checkpoint" || schema == "flexsp.report")
    fail(fmt::format("{}: inspecting {} files is not yet supported", path, schema));
  if (schema.empty())
    fail(
        fmt::format("{}: not a flexsp file (no root attribute 'schema'; expected flexsp.tokens, "
                    "flexsp.checkpoint or flexsp.report)",
                    path));
  fail(
      fmt::format("{}: unknown schema '{}' (expected flexsp.tokens, flexsp.checkpoint or "
                  "flexsp.report)",
                  path, schema));
}

}  // namespace

int cmd_inspect(const CommandContext& ctx, const Args& args) {
  agree(ctx.world, [&] {
    std::string file;
    bool json = false, help = false;
    po::options_description desc("options");
    // clang-format off
    desc.add_options()
        ("json", po::bool_switch(&json), "print one JSON object instead of text")
        ("help,h", po::bool_switch(&help), "print this help");
    // clang-format on
    po::options_description hidden;
    hidden.add_options()("file", po::value(&file));
    po::options_description all;
    all.add(desc).add(hidden);
    po::positional_options_description pos;
    pos.add("file", 1);
    po::variables_map vm;
    parse_verb_options("inspect", args, all, vm, &pos);
    if (help) {
      if (ctx.rank == 0)
        std::cout << "usage: flexsp inspect FILE [--json]\n\nSummary of a flexsp HDF5 file "
                     "(token dataset; checkpoints and reports later).\nA token dataset is "
                     "also fully validated; a defect makes the exit status non-zero.\n\n"
                  << desc << std::flush;
      return;
    }
    FLEXSP_CHECK(!file.empty(), "inspect: no FILE given (see flexsp inspect --help)");
    if (ctx.rank == 0) inspect_file(file, json);
  });
  return 0;
}

}  // namespace flexsp
