// HF folder -> flexsp weights (see hf_import.h). config.json is read with HF's defaults
// for absent keys (num_key_value_heads = num_attention_heads, rms_norm_eps = 1e-6,
// rope_theta = 10000, tie_word_embeddings = false, hidden_act = silu), which is what
// transformers' LlamaConfig assumes when it loads the same file.
#include "io/export/hf_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "io/export/safetensors_read.h"
#include "io/weights/weights.h"
#include "lib/model/params.h"
#include "lib/util/error.h"

namespace flexsp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& p) {
  std::error_code ec;
  FLEXSP_CHECK(fs::is_regular_file(p, ec), "{}: no such file", p.string());
  std::ifstream in(p);
  FLEXSP_CHECK(in.good(), "{}: cannot read", p.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(fmt::format("{}: malformed JSON: {}", p.string(), e.what()));
  }
}

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Typed access to config.json keys; every error names the file and the key.
struct ConfigJson {
  std::string path;
  json j;

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  [[noreturn]] void bad(const std::string& k, const std::string& why) const {
    fail(fmt::format("{}: {}: {}", path, k, why));
  }
  int size(const char* k, int dflt = 0) const {
    if (!has(k)) {
      if (dflt > 0) return dflt;
      bad(k, "missing");
    }
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < 1 || j[k].get<int64_t>() > (int64_t{1} << 30))
      bad(k, fmt::format("{} is not a positive integer", j[k].dump()));
    return j[k].get<int>();
  }
  // Key k of object o (j, or a nested object whose keys are named prefix + k in errors).
  double number(const json& o, const char* k, double dflt, bool required = false,
                const char* prefix = "") const {
    if (!o.contains(k) || o[k].is_null()) {
      if (required) bad(prefix + std::string(k), "missing");
      return dflt;
    }
    if (!o[k].is_number()) bad(prefix + std::string(k), fmt::format("{} is not a number", o[k].dump()));
    return o[k].get<double>();
  }
  bool flag(const char* k) const {
    if (!has(k)) return false;
    if (!j[k].is_boolean()) bad(k, fmt::format("{} is not true or false", j[k].dump()));
    return j[k].get<bool>();
  }
  std::string text(const char* k, const char* dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_string()) bad(k, fmt::format("{} is not a string", j[k].dump()));
    return j[k].get<std::string>();
  }
};

// HF's rope_scaling object (null: none). Both spellings of the type key are HF's.
void read_rope_scaling(const ConfigJson& cj, ModelConfig& c) {
  if (!cj.has("rope_scaling")) return;
  const json& r = cj.j["rope_scaling"];
  if (!r.is_object()) cj.bad("rope_scaling", fmt::format("{} is not an object or null", r.dump()));
  const char* tk = r.contains("rope_type") ? "rope_type" : "type";
  if (!r.contains(tk) || !r[tk].is_string()) cj.bad("rope_scaling", "has no rope_type");
  const std::string type = r[tk].get<std::string>();
  if (type == "default") return;
  const std::optional<RopeScaling> s = enum_parse<RopeScaling>(type);
  if (!s || *s == RopeScaling::none)
    cj.bad("rope_scaling", fmt::format("type '{}' is not supported (linear, llama3 or none)", type));
  c.rope_scaling = *s;
  const char* in = "rope_scaling.";
  c.rope_scaling_factor = cj.number(r, "factor", 1, true, in);
  if (*s == RopeScaling::llama3) {
    c.rope_low_freq_factor = cj.number(r, "low_freq_factor", 0, true, in);
    c.rope_high_freq_factor = cj.number(r, "high_freq_factor", 0, true, in);
    const double orig = cj.number(r, "original_max_position_embeddings", 0, true, in);
    if (orig < 1 || orig > (1 << 30) || orig != static_cast<int>(orig))
      cj.bad("rope_scaling.original_max_position_embeddings", fmt::format("{} is not a positive integer", orig));
    c.rope_original_max_position = static_cast<int>(orig);
  }
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  const ConfigJson cj{(fs::path(dir) / "config.json").string(), read_json(fs::path(dir) / "config.json")};
  FLEXSP_CHECK(cj.j.is_object(), "{}: not a JSON object", cj.path);
  if (cj.has("architectures")) {
    const json& a = cj.j["architectures"];
    const bool llama = a.is_array() && std::find(a.begin(), a.end(), json("LlamaForCausalLM")) != a.end();
    if (!llama) cj.bad("architectures", fmt::format("{}: only LlamaForCausalLM can be imported", a.dump()));
  } else if (cj.text("model_type", "") != "llama") {
    cj.bad("architectures", "missing, and model_type is not llama");
  }
  const std::string act = cj.text("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    cj.bad("hidden_act", fmt::format("'{}' is not supported (LLaMA's MLP is SwiGLU: silu)", act));
  if (cj.flag("attention_bias")) cj.bad("attention_bias", "true: biases are not supported (LLaMA has none)");
  if (cj.flag("mlp_bias")) cj.bad("mlp_bias", "true: biases are not supported (LLaMA has none)");

  HfConfig h;
  ModelConfig& c = h.model;
  c.preset = "hf";
  c.hidden = cj.size("hidden_size");
  c.ffn = cj.size("intermediate_size");
  c.layers = cj.size("num_hidden_layers");
  c.heads = cj.size("num_attention_heads");
  c.kv_heads = cj.size("num_key_value_heads", c.heads);
  c.vocab = cj.size("vocab_size");
  c.norm_eps = cj.number(cj.j, "rms_norm_eps", 1e-6);
  c.rope_theta = cj.number(cj.j, "rope_theta", 10000);
  c.tie_embeddings = cj.flag("tie_word_embeddings");
  c.head_dim = c.hidden / c.heads;
  if (cj.has("head_dim") && (c.hidden % c.heads != 0 || cj.size("head_dim") != c.head_dim))
    cj.bad("head_dim", fmt::format("{} is not hidden_size / num_attention_heads = {} / {} (flexsp needs it to be)",
                                   cj.j["head_dim"].dump(), c.hidden, c.heads));
  read_rope_scaling(cj, c);
  try {
    validate_model_config(c);
  } catch (const Error& e) {
    fail(fmt::format("{}: {}", cj.path, e.what()));
  }
  if (cj.has("max_position_embeddings")) h.max_position_embeddings = cj.size("max_position_embeddings");
  h.torch_dtype = cj.text("torch_dtype", "");
  return h;
}

namespace {

// The weights files of an HF directory: one model.safetensors, or the shards its index
// lists (weight_map: tensor -> shard file name). source names the weights in errors.
std::vector<std::unique_ptr<SafetensorsFile>> open_weight_files(
    const std::string& dir, std::string& source, std::map<std::string, std::string>& weight_map) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  if (fs::exists(single, ec)) {
    source = single.string();
    files.push_back(std::make_unique<SafetensorsFile>(source));
    return files;
  }
  FLEXSP_CHECK(fs::exists(index, ec),
               "{}: holds neither model.safetensors nor model.safetensors.index.json "
               "(only safetensors weights can be imported)", dir);
  source = index.string();
  const json ij = read_json(index);
  FLEXSP_CHECK(ij.is_object() && ij.contains("weight_map") && ij["weight_map"].is_object(),
               "{}: has no weight_map object", source);
  std::set<std::string> shards;
  for (const auto& [name, file] : ij["weight_map"].items()) {
    FLEXSP_CHECK(file.is_string(), "{}: weight_map: {} is not a file name", source, name);
    const std::string f = file.get<std::string>();
    FLEXSP_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                 "{}: weight_map: {} names '{}', not a file in {}", source, name, f, dir);
    weight_map[name] = f;
    shards.insert(f);
  }
  FLEXSP_CHECK(!shards.empty(), "{}: weight_map is empty", source);
  for (const std::string& f : shards) {
    const fs::path p = fs::path(dir) / f;
    FLEXSP_CHECK(fs::is_regular_file(p, ec), "{}: names shard {}, which does not exist", source, p.string());
    files.push_back(std::make_unique<SafetensorsFile>(p.string()));
  }
  return files;
}

// Where every tensor is: in exactly one file, and where the index says.
std::map<std::string, const SafetensorsFile*> locate_tensors(
    const std::vector<std::unique_ptr<SafetensorsFile>>& files,
    const std::map<std::string, std::string>& weight_map, const std::string& source) {
  std::map<std::string, const SafetensorsFile*> where;
  for (const auto& f : files)
    for (const auto& [name, e] : f->tensors()) {
      auto [it, fresh] = where.emplace(name, f.get());
      FLEXSP_CHECK(fresh, "{}: tensor {} is also in {}", f->path(), name, it->second->path());
    }
  for (const auto& [name, file] : weight_map) {
    auto it = where.find(name);
    FLEXSP_CHECK(it != where.end(), "{}: tensor {} is listed in {}, which does not hold it", source, name, file);
    FLEXSP_CHECK(fs::path(it->second->path()).filename() == file, "{}: tensor {} is listed in {} but is in {}",
                 source, name, file, it->second->path());
  }
  if (!weight_map.empty())
    for (const auto& [name, f] : where)
      FLEXSP_CHECK(weight_map.count(name), "{}: tensor {} is not listed in {}", f->path(), name, source);
  return where;
}

}  // namespace

HfImportResult import_hf(const std::string& dir, const std::string& out) {
  HfImportResult r;
  r.config = read_hf_config(dir);
  const ModelConfig& c = r.config.model;
  const ParamTable t = make_param_table(c);
  std::string source;
  std::map<std::string, std::string> weight_map;
  const std::vector<std::unique_ptr<SafetensorsFile>> files = open_weight_files(dir, source, weight_map);
  for (const auto& f : files) r.files.push_back(f->path());
  const std::map<std::string, const SafetensorsFile*> where = locate_tensors(files, weight_map, source);

  // Exactly the parameters of this config, in the shapes it implies.
  std::set<std::string> expected;
  for (const ParamView& v : t.views) expected.insert(v.name);
  bool tied_head = false;
  for (const auto& [name, f] : where) {
    if (expected.count(name)) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) {
      r.notes.push_back(fmt::format("skipped {} (derived from rope_theta, not a parameter)", name));
      continue;
    }
    if (name == "lm_head.weight" && c.tie_embeddings) {
      tied_head = true;
      continue;
    }
    FLEXSP_CHECK(!name.ends_with(".bias"), "{}: tensor {}: biases are not supported (LLaMA has none)", f->path(),
                 name);
    fail(fmt::format("{}: unexpected tensor {} (not a parameter of the LlamaForCausalLM config.json describes)",
                     f->path(), name));
  }
  for (const ParamView& v : t.views) {
    auto it = where.find(v.name);
    FLEXSP_CHECK(it != where.end(), "{}: tensor {} is missing", source, v.name);
    const std::vector<int64_t>& got = it->second->tensors().at(v.name).shape;
    FLEXSP_CHECK(got == v.shape(), "{}: tensor {} has shape {}, but config.json implies {}", it->second->path(),
                 v.name, shape_text(got), shape_text(v.shape()));
  }
  if (tied_head) {  // HF ignores a tied lm_head.weight; accept it only if it is the embedding
    const SafetensorsFile* hf = where.at("lm_head.weight");
    const SafetensorsFile* ef = where.at("model.embed_tokens.weight");
    const std::vector<int64_t> shape = {c.vocab, c.hidden};
    FLEXSP_CHECK(hf->tensors().at("lm_head.weight").shape == shape,
                 "{}: tensor lm_head.weight has shape {}, but config.json implies {}", hf->path(),
                 shape_text(hf->tensors().at("lm_head.weight").shape), shape_text(shape));
    std::vector<float> a(static_cast<size_t>(c.vocab) * c.hidden), b(a.size());
    hf->read_f32("lm_head.weight", a.data());
    ef->read_f32("model.embed_tokens.weight", b.data());
    FLEXSP_CHECK(std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) { return x == y || (x != x && y != y); }),
                 "{}: tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight",
                 hf->path());
    r.notes.push_back("skipped lm_head.weight (tie_word_embeddings: equal to model.embed_tokens.weight)");
  }

  write_weights(out, c, t, [&](const ParamView& v, float* buf) { where.at(v.name)->read_f32(v.name, buf); });
  r.tensors = static_cast<int64_t>(t.views.size());
  return r;
}

}  // namespace flexsp
