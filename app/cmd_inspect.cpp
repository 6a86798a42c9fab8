// flexsp inspect FILE: summary of a flexsp HDF5 file (docs/commands.md). A file says what
// it is by its root attribute `schema`; inspect_file() switches on it, with one function
// per kind. Token datasets are described and then fully validated; weights files list their
// model and tensors; timing reports summarize their steps; checkpoints show their step,
// ranks, model and tensors and have every checksum recomputed (io/checkpoint). Rank 0 does
// the work inside agree(), so under mpirun a bad file ends every rank with one line.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "io/checkpoint/checkpoint.h"
#include "io/dataset/data_sources.h"
#include "io/dataset/token_dataset.h"
#include "io/hdf5/h5.h"
#include "io/report/pipeline_report.h"
#include "io/weights/weights.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
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

// What the ids are: documents, tokens, vocab_size, eos_id, the tokenizer (and its hash).
void add_dataset_keys(const TokenDataset& ds, nlohmann::json& j) {
  j["documents"] = ds.num_docs();
  j["tokens"] = ds.num_tokens();
  j["vocab_size"] = ds.vocab_size();
  j["eos_id"] = ds.eos_id();
  j["tokenizer"] = ds.tokenizer();
  if (!ds.tokenizer_sha256().empty()) j["tokenizer_sha256"] = ds.tokenizer_sha256();
}

// Scans every token (TokenDataset::validate) after the summary; prints "valid: yes|no", or
// the JSON summary with "valid" (and "error"). Rethrows the defect.
void validate_and_print(const TokenDataset& ds, nlohmann::json& j, bool json) {
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
  add_dataset_keys(ds, j);
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
    if (!ds.tokenizer_sha256().empty()) std::printf("sha256:        %s\n", ds.tokenizer_sha256().c_str());
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
  validate_and_print(ds, j, json);
}

// The extension point: one branch per schema a flexsp file can carry.
// A weights file: the model configuration and every tensor with its shape.
void inspect_weights(const std::string& path, bool json) {
  const ModelConfig c = read_weights_config(path);
  const ParamTable t = make_param_table(c);
  nlohmann::json j;
  j["path"] = path;
  j["schema"] = "flexsp.weights";
  j["model"] = model_config_summary(c);
  j["parameters"] = model_num_params(c);
  h5::Id f = h5::open_file(path);
  for (const ParamView& v : t.views) {
    const std::string name = "model/" + v.name;
    FLEXSP_CHECK(h5::exists(f.get(), name), "{}: tensor {} is missing", path, name);
    j["tensors"][v.name] = v.shape();
  }
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: flexsp weights\n  model:      %s\n  parameters: %lld\n  tensors:    %zu\n", path.c_str(),
              model_config_summary(c).c_str(), static_cast<long long>(model_num_params(c)), t.views.size());
  for (const ParamView& v : t.views) {
    const auto sh = v.shape();
    std::printf("    %-52s [%s]\n", v.name.c_str(),
                sh.size() == 1 ? fmt::format("{}", sh[0]).c_str() : fmt::format("{}, {}", sh[0], sh[1]).c_str());
  }
}

// A timing report: the run's description and the per-step columns, summarized.
void inspect_report(const std::string& path, bool json) {
  h5::Id f = h5::open_file(path);
  nlohmann::json j;
  j["path"] = path;
  j["schema"] = "flexsp.report";
  for (const char* k : {"world_size", "nodes", "ranks_per_node", "zero"}) j[k] = h5::read_attr_int(f.get(), k);
  for (const char* k : {"sp_mode", "backend", "model"}) j[k] = h5::read_attr_string(f.get(), k);
  auto column = [&](const std::string& name) {
    h5::Id d = h5::open_dataset(f.get(), "steps/" + name);
    std::vector<double> v(static_cast<size_t>(h5::extent_1d(d.get(), name)));
    if (!v.empty())
      h5::check_status(H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), path + ": " + name);
    return v;
  };
  const auto loss = column("loss"), ms = column("wall_ms"), tokens = column("tokens"), mfu = column("mfu");
  j["steps"] = loss.size();
  double tok = 0, t = 0, m = 0;
  for (size_t i = 0; i < ms.size(); ++i) tok += tokens[i], t += ms[i], m += mfu[i];
  j["tokens"] = tok;
  j["mean_step_ms"] = ms.empty() ? 0 : t / double(ms.size());
  j["tokens_per_s"] = t > 0 ? tok / (t / 1e3) : 0;
  j["mean_mfu"] = mfu.empty() ? 0 : m / double(mfu.size());
  j["first_loss"] = loss.empty() ? 0 : loss.front();
  j["last_loss"] = loss.empty() ? 0 : loss.back();
  const ReportPipeline stages = read_pipeline_h5(f.get(), path);  // stages == 0: none
  if (stages.stages > 0) j["pipeline"] = pipeline_json(stages);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: flexsp timing report\n  run:        %lld ranks (%lld nodes), sp_mode %s, ZeRO %lld, %s backend\n"
              "  model:      %s\n  steps:      %zu, %.0f tokens, %.1f ms/step, %.0f tokens/s, MFU %.2e\n"
              "  loss:       %.4f -> %.4f\n",
              path.c_str(), static_cast<long long>(j["world_size"].get<int64_t>()),
              static_cast<long long>(j["nodes"].get<int64_t>()), j["sp_mode"].get<std::string>().c_str(),
              static_cast<long long>(j["zero"].get<int64_t>()), j["backend"].get<std::string>().c_str(),
              j["model"].get<std::string>().c_str(), loss.size(), tok, j["mean_step_ms"].get<double>(),
              j["tokens_per_s"].get<double>(), j["mean_mfu"].get<double>(), j["first_loss"].get<double>(),
              j["last_loss"].get<double>());
  if (stages.stages > 0) std::printf("  %s", pipeline_table(stages).c_str());
}

// A checkpoint: what was saved when, by how many ranks, the model, every tensor with its
// shape, and each dataset's checksum recomputed (a mismatch fails naming the tensor).
void inspect_checkpoint(const std::string& path, bool json) {
  {
    h5::Id f = h5::open_file(path);
    FLEXSP_CHECK(h5::exists(f.get(), "model"), "{}: no /model group (not a complete flexsp checkpoint)", path);
  }
  const ModelConfig c = read_weights_config(path);
  const CheckpointMeta m = checkpoint_read_meta(path, c);
  const std::vector<CheckpointTensor> tensors = checkpoint_verify(path);
  std::error_code ec;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  std::vector<std::string> bad;
  for (const CheckpointTensor& t : tensors)
    if (!t.ok) bad.push_back(t.name);
  nlohmann::json j;
  j["path"] = path;
  j["schema"] = "flexsp.checkpoint";
  j["step"] = m.step;
  j["consumed_tokens"] = m.consumed_tokens;
  j["world_size"] = m.world_size;
  j["zero"] = m.zero;
  j["seed"] = m.seed;
  j["adam_steps"] = m.adam_steps;
  for (const SourceCursor& k : m.cursor.sources)
    j["data_cursor"].push_back({{"epoch", k.epoch}, {"position", k.position}, {"piece", k.piece}, {"tokens", k.tokens}});
  j["flexsp_version"] = m.version;
  j["model"] = model_config_summary(c);
  j["parameters"] = model_num_params(c);
  j["file_bytes"] = bytes;
  for (const CheckpointTensor& t : tensors) j["tensors"][t.name] = t.shape;
  j["checksums"] = bad.empty() ? "ok" : "mismatch";
  j["checksum_mismatches"] = bad;
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: flexsp checkpoint (flexsp %s)\n  step:       %lld, %lld tokens consumed, AdamW step %lld\n"
                "  saved by:   %lld ranks, ZeRO %lld; seed %llu; data cursor %s\n"
                "  model:      %s (%lld parameters)\n  size:       %.1f MB, %zu tensors\n",
                path.c_str(), m.version.c_str(), static_cast<long long>(m.step),
                static_cast<long long>(m.consumed_tokens), static_cast<long long>(m.adam_steps),
                static_cast<long long>(m.world_size), static_cast<long long>(m.zero),
                static_cast<unsigned long long>(m.seed), cursor_text(m.cursor).c_str(),
                model_config_summary(c).c_str(), static_cast<long long>(model_num_params(c)),
                static_cast<double>(bytes) / 1e6, tensors.size());
    for (const CheckpointTensor& t : tensors)
      std::printf("    %-72s [%s]%s\n", t.name.c_str(), fmt::format("{}", fmt::join(t.shape, ", ")).c_str(),
                  t.ok ? "" : "  CHECKSUM MISMATCH");
    std::printf("  checksums:  %s\n", bad.empty() ? fmt::format("all {} verified", tensors.size()).c_str()
                                                   : fmt::format("{} of {} do not match", bad.size(), tensors.size()).c_str());
  }
  std::fflush(stdout);
  FLEXSP_CHECK(bad.empty(), "{}: checksum mismatch in /{}: the file is corrupt", path, bad.front());
}

// A data.path (a mixture "a.h5:0.6, b.h5:0.4", or a list of files): the files opened as
// a run opens them (they must agree), each source's share, documents and tokens, and how
// many tokens of training make one epoch of it (its tokens over its share); every token
// validated. Epochs count whole documents: data.max_seq_len's cuts add a token per piece.
void inspect_data(const std::string& spec, bool json) {
  const std::vector<DataSource> sources = expand_data_sources(spec);
  TokenDataset ds = TokenDataset::open(data_files(sources));
  std::vector<int64_t> len(static_cast<size_t>(ds.num_docs()));
  for (int64_t i = 0; i < ds.num_docs(); ++i) len[static_cast<size_t>(i)] = ds.doc_length(i);
  const std::vector<SamplerSource> ranges = sampler_sources(ds, sources);
  const BatchSampler sampler(len, {0, int64_t(1) << 40, 0, 1}, ranges);
  nlohmann::json j;
  j["data_path"] = spec;
  add_dataset_keys(ds, j);
  std::string table = fmt::format("  {:<24} {:>6} {:>6} {:>10} {:>12} {:>14}\n", "source", "share", "files",
                                  "documents", "tokens", "epoch per");
  for (size_t k = 0; k < sources.size(); ++k) {
    const SamplerSource& r = ranges[k];
    int64_t tokens = 0;
    for (int64_t d = r.first_doc; d < r.first_doc + r.num_docs; ++d) tokens += len[static_cast<size_t>(d)];
    const int s = static_cast<int>(k);
    const double every = static_cast<double>(sampler.epoch_tokens(s)) / sampler.share(s);
    j["sources"].push_back({{"name", sources[k].name}, {"files", sources[k].files}, {"weight", sources[k].weight},
                            {"share", sampler.share(s)}, {"documents", r.num_docs}, {"tokens", tokens},
                            {"epoch_every_tokens", every}});
    table += fmt::format("  {:<24} {:>6.3f} {:>6} {:>10} {:>12} {:>14.0f}\n", sources[k].name, sampler.share(s),
                         sources[k].files.size(), r.num_docs, tokens, every);
  }
  if (!json) {
    std::printf("data.path:     %s\n", spec.c_str());
    std::printf("sources:       %zu%s\n", sources.size(), sources.size() > 1 ? " (a mixture)" : "");
    std::printf("documents:     %lld\n", static_cast<long long>(ds.num_docs()));
    std::printf("tokens:        %lld\n", static_cast<long long>(ds.num_tokens()));
    std::printf("vocab_size:    %d\n", ds.vocab_size());
    std::printf("eos_id:        %d\n", ds.eos_id());
    std::printf("tokenizer:     %s\n", ds.tokenizer().c_str());
    std::printf("%s  (epoch per: the tokens of training that draw one epoch of the source)\n", table.c_str());
    std::fflush(stdout);
  }
  validate_and_print(ds, j, json);
}

void inspect_file(const std::string& path, bool json) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && path.find_first_of(":,*?[") != std::string::npos)
    return inspect_data(path, json);
  std::string schema;
  {
    h5::Id f = h5::open_file(path);  // names missing / non-HDF5 files
    if (h5::has_attr(f.get(), "schema")) schema = h5::read_attr_string(f.get(), "schema");
  }
  if (schema == "flexsp.tokens") return inspect_tokens(path, json);
  if (schema == "flexsp.weights") return inspect_weights(path, json);
  if (schema == "flexsp.report") return inspect_report(path, json);
  if (schema == "flexsp.checkpoint") return inspect_checkpoint(path, json);
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
        std::cout << "usage: flexsp inspect FILE|DATA_PATH [--json]\n\nSummary of a flexsp HDF5 file "
                     "(token dataset, weights, timing report, checkpoint),\nor of a data.path (a list, "
                     "glob or mixture 'a.h5:0.6, b.h5:0.4': each source's\nshare, documents, tokens and "
                     "epoch length). A token dataset is also fully validated\nand a checkpoint's checksums "
                     "verified; a defect makes the exit status non-zero.\n\n"
                  << desc << std::flush;
      return;
    }
    FLEXSP_CHECK(!file.empty(), "inspect: no FILE given (see flexsp inspect --help)");
    if (ctx.rank == 0) inspect_file(file, json);
  });
  return 0;
}

}  // namespace flexsp
