// flexsp import: a HuggingFace LlamaForCausalLM folder -> a flexsp weights file
// (docs/commands.md). The work is io/export/hf_import; this file is the command line. Like
// export, it runs on rank 0 inside agree(); other ranks wait. An existing --out is
// replaced only with --force (and then whole or not at all: temporary name + rename).
// It ends with the [model] lines a training config needs to load the file, since
// `flexsp train` takes the shape from its config (the weights must match it).
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "io/export/hf_import.h"
#include "lib/model/rope.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace flexsp {

namespace {

struct ImportArgs {
  std::string hf, out;
  bool force = false;
};

po::options_description import_options(ImportArgs& a) {
  po::options_description o("flexsp import options");
  o.add_options()
      ("help,h", "this help")
      ("hf", po::value(&a.hf), "HF folder: config.json and model.safetensors (or model-*-of-*.safetensors "
                              "with model.safetensors.index.json)")
      ("out", po::value(&a.out), "the weights file to write (HDF5, /model/<HF name>, float32)")
      ("force", po::bool_switch(&a.force), "overwrite an existing --out");
  return o;
}

}  // namespace

int cmd_import(const CommandContext& ctx, const Args& args) {
  ImportArgs a;
  po::variables_map vm;
  const po::options_description opts = import_options(a);
  agree(ctx.world, [&] { parse_verb_options("import", args, opts, vm); });
  if (vm.count("help")) {
    if (ctx.rank == 0)
      std::cout << "usage: flexsp import --hf DIR --out W.h5 [--force]\n\n"
                << "Reads a HuggingFace LlamaForCausalLM (bf16, fp16 or fp32 safetensors, single or\n"
                << "sharded) into flexsp weights for `flexsp train --load-weights`, `eval` and `export`.\n"
                << "rope_theta and rope_scaling are kept in the file; a run started from it keeps\n"
                << "them unless its config sets model.rope_theta / model.rope_scaling. Ends with the\n"
                << "[model] section a training config needs for the file.\n\n"
                << opts << "\n";
    return 0;
  }
  agree(ctx.world, [&] {
    if (ctx.rank != 0) return;
    FLEXSP_CHECK(!a.hf.empty(), "import: --hf DIR is required (see flexsp import --help)");
    FLEXSP_CHECK(!a.out.empty(), "import: --out W.h5 is required (see flexsp import --help)");
    std::error_code ec;
    FLEXSP_CHECK(fs::is_directory(a.hf, ec), "import: --hf {}: no such directory", a.hf);
    if (fs::exists(a.out, ec)) {
      FLEXSP_CHECK(!fs::is_directory(a.out, ec), "import: --out {} is a directory (give a file name)", a.out);
      FLEXSP_CHECK(a.force, "import: --out {} already exists (use --force to overwrite)", a.out);
    }
    const HfImportResult r = import_hf(a.hf, a.out);
    const ModelConfig& c = r.config.model;
    std::printf("import: %s -> %s: %lld tensors from %zu file%s\n", a.hf.c_str(), a.out.c_str(),
                static_cast<long long>(r.tensors), r.files.size(), r.files.size() == 1 ? "" : "s");
    for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
    std::printf("  model: %s; %s", model_config_summary(c).c_str(), rope_summary(c).c_str());
    if (r.config.max_position_embeddings > 0)
      std::printf("; max_position_embeddings %lld", static_cast<long long>(r.config.max_position_embeddings));
    std::printf("\n\nfor `flexsp train --load-weights %s`, the [model] section of its config:\n", a.out.c_str());
    std::printf("%s", fmt::format("[model]\nhidden = {}\nlayers = {}\nheads = {}\nkv_heads = {}\nffn = {}\n"
                                  "vocab = {}\nnorm_eps = {}\ntie_embeddings = {}\n",
                                  c.hidden, c.layers, c.heads, c.kv_heads, c.ffn, c.vocab, c.norm_eps,
                                  c.tie_embeddings).c_str());
    std::printf("# RoPE: the file's (above) unless rope_theta / rope_scaling are set here\n");
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace flexsp
