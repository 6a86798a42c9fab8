// flexsp export: a checkpoint (or weights file) -> the HuggingFace layout of
// LlamaForCausalLM: DIR/config.json and DIR/model.safetensors (docs/commands.md,
// docs/model.md). The tensors already carry HF names and [out, in] shapes, so export is a
// format change only; with tied embeddings lm_head.weight is left out (tie_word_embeddings
// = true), as HF saves it.
//
// Choices: the safetensors file is written by io/export (no Python); bf16 (the default,
// what HF checkpoints ship) by round-to-nearest-even from the fp32 master weights, or fp32
// for a lossless copy. An existing non-empty DIR is refused without --force; with it only
// our two files are replaced (each written to a temporary name and renamed).
// max_position_embeddings is the context the model was trained for: the checkpoint's
// data.max_seq_len, or --max-seq-len (a weights file stores none; default 4096, the
// config default). rope_theta and rope_scaling are the model's (HF's rope_scaling object
// for linear / llama3, null for none), so HF computes the same frequencies. Both files
// are written under temporary names and renamed only when both are complete: a failure
// (a full disk) leaves no partial file, the old files (--force) as they were, and no
// directory export created. Runs on rank 0 inside agree(); other ranks wait.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "app/commands.h"
#include "app/options.h"
#include "io/export/model_file.h"
#include "io/export/safetensors.h"
#include "io/util/atomic_file.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace flexsp {

namespace {

struct ExportArgs {
  std::string checkpoint, out, dtype = "bf16";
  int64_t max_seq_len = 0;
  bool force = false;
};

po::options_description export_options(ExportArgs& a) {
  po::options_description o("flexsp export options");
  o.add_options()
      ("help,h", "this help")
      ("checkpoint", po::value(&a.checkpoint), "model file: a checkpoint or a weights file (--dump-weights)")
      ("out", po::value(&a.out), "output directory (config.json, model.safetensors)")
      ("dtype", po::value(&a.dtype)->default_value(a.dtype), "tensor type in model.safetensors: bf16 or fp32")
      ("max-seq-len", po::value(&a.max_seq_len),
       "max_position_embeddings in config.json (default: the checkpoint's data.max_seq_len, else 4096)")
      ("force", po::bool_switch(&a.force), "write into an existing non-empty directory");
  return o;
}

nlohmann::ordered_json hf_config(const ModelFile& m, const ExportArgs& a, int64_t max_pos) {
  const ModelConfig& c = m.config;
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.ffn;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  // linear under "type", the spelling every transformers version reads (before 4.43 the
  // object must be exactly {type, factor}); llama3 exists only since 4.43, as rope_type.
  if (c.rope_scaling == RopeScaling::linear) {
    j["rope_scaling"] = {{"type", "linear"}, {"factor", c.rope_scaling_factor}};
  } else if (c.rope_scaling == RopeScaling::llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["max_position_embeddings"] = max_pos;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["initializer_range"] = c.init_std;
  j["torch_dtype"] = a.dtype == "bf16" ? "bfloat16" : "float32";
  j["use_cache"] = true;
  return j;
}

void write_text_file(const std::string& tmp, const std::string& path, const std::string& text) {
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  FLEXSP_CHECK(f.good(), "{}: cannot write: {}", path, std::strerror(errno));
}

}  // namespace

int cmd_export(const CommandContext& ctx, const Args& args) {
  ExportArgs a;
  po::variables_map vm;
  const po::options_description opts = export_options(a);
  agree(ctx.world, [&] { parse_verb_options("export", args, opts, vm); });
  if (vm.count("help")) {
    if (ctx.rank == 0)
      std::cout << "usage: flexsp export --checkpoint C --out DIR [--dtype bf16|fp32] [--force]\n\n"
                << opts << "\n";
    return 0;
  }
  agree(ctx.world, [&] {
    if (ctx.rank != 0) return;
    FLEXSP_CHECK(!a.checkpoint.empty(), "export: --checkpoint is required (see flexsp export --help)");
    FLEXSP_CHECK(!a.out.empty(), "export: --out is required (see flexsp export --help)");
    FLEXSP_CHECK(a.dtype == "bf16" || a.dtype == "fp32", "export: --dtype must be bf16 or fp32, got '{}'", a.dtype);
    FLEXSP_CHECK(!vm.count("max-seq-len") || a.max_seq_len >= 1, "export: --max-seq-len must be >= 1");
    std::error_code ec;
    const fs::path dir(a.out);
    if (fs::exists(dir, ec)) {
      FLEXSP_CHECK(fs::is_directory(dir, ec), "export: --out {} exists and is not a directory", a.out);
      FLEXSP_CHECK(a.force || fs::is_empty(dir, ec),
                   "export: --out {} exists and is not empty (use --force to overwrite)", a.out);
    }
    const ModelFile m = read_model_file(a.checkpoint, true);
    const int64_t seq = vm.count("max-seq-len") ? a.max_seq_len : m.max_seq_len > 0 ? m.max_seq_len : 4096;
    const bool created = !fs::exists(dir, ec);
    fs::create_directories(dir, ec);
    FLEXSP_CHECK(!ec, "export: cannot create {}: {}", a.out, ec.message());

    std::vector<StTensor> tensors;
    for (const ParamView& v : m.table.views) tensors.push_back({v.name, v.shape(), m.params.data() + v.offset});
    const StDType dt = a.dtype == "bf16" ? StDType::bf16 : StDType::f32;
    const std::map<std::string, std::string> meta = {
        {"format", "pt"}, {"source", "flexsp " FLEXSP_VERSION}, {"checkpoint", a.checkpoint}};
    const std::string st = (dir / "model.safetensors").string(), cj = (dir / "config.json").string();
    const std::string st_tmp = temp_path(st), cj_tmp = temp_path(cj);
    try {
      write_safetensors_file(st_tmp, st, tensors, dt, meta);
      write_text_file(cj_tmp, cj, hf_config(m, a, seq).dump(2) + "\n");
      publish_file(st_tmp, st);
      publish_file(cj_tmp, cj);
    } catch (...) {
      std::remove(st_tmp.c_str());
      std::remove(cj_tmp.c_str());
      if (created) fs::remove(dir, ec);  // only if still empty: never anything of the user's
      throw;
    }
    std::printf("export: %s (%s) -> %s/config.json, %s/model.safetensors: %zu tensors, %s, %s\n",
                a.checkpoint.c_str(), m.schema.empty() ? "no schema" : m.schema.c_str(), a.out.c_str(),
                a.out.c_str(), tensors.size(), a.dtype.c_str(), model_config_summary(m.config).c_str());
  });
  return 0;
}

}  // namespace flexsp
