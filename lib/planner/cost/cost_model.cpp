// Cost-model file I/O and the arithmetic of lib/planner/cost/cost_model.h. The parser is a few
// lines on purpose: the file is flat `key = value`, and a hand parser can name the line of
// a bad value, which Boost.Program_options' INI reader cannot.
#include "lib/planner/cost/cost_model.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "lib/model/model_config.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

double parse_number(const std::string& v, const std::string& where) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FLEXSP_CHECK(used == v.size() && !v.empty() && std::isfinite(x), "{}: '{}' is not a number",
               where, v);
  return x;
}

}  // namespace

CostModel cost_model_default() { return CostModel{}; }

CostModel cost_model_parse(const std::string& text, const std::string& source) {
  CostModel cm;
  cm.source = source;
  bool bw_intra_given = false, bw_inter_given = false, bw_tp_given = false, shape_given = false;
  std::istringstream in(text);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const size_t hash = line.find_first_of("#;");
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      FLEXSP_CHECK(line == "[cost_model]", "{}:{}: unknown section '{}' (expected [cost_model])",
                   source, lineno, line);
      continue;
    }
    const size_t eq = line.find('=');
    FLEXSP_CHECK(eq != std::string::npos, "{}:{}: expected 'key = value', got '{}'", source,
                 lineno, line);
    const std::string key = trim(line.substr(0, eq)), val = trim(line.substr(eq + 1));
    const std::string where = fmt::format("{}:{}: {}", source, lineno, key);
    auto positive = [&](double& field, bool allow_zero) {
      field = parse_number(val, where);
      FLEXSP_CHECK(allow_zero ? field >= 0 : field > 0, "{}: must be {}, got {}", where,
                   allow_zero ? "non-negative" : "positive", val);
    };
    if (key == "model") {
      FLEXSP_CHECK(!val.empty(), "{}: empty", where);
      cm.model = val;
      if (!shape_given) cm.model_hidden = cm.model_layers = 0;  // unless a preset names it
      try {
        ModelSection ms;
        ms.preset = val;
        const ModelConfig ref = resolve_model_config(ms, {}, 256);  // any vocab: shape only
        if (!shape_given) cm.model_hidden = ref.hidden, cm.model_layers = ref.layers;
      } catch (const Error&) {
      }
    } else if (key == "model_hidden" || key == "model_layers") {
      double v = 0;
      positive(v, false);
      FLEXSP_CHECK(v == std::floor(v), "{}: must be a whole number, got {}", where, val);
      (key == "model_hidden" ? cm.model_hidden : cm.model_layers) = static_cast<int>(v);
      shape_given = true;
    } else if (key == "a1_ms") positive(cm.a1_ms, true);
    else if (key == "a2_ms") positive(cm.a2_ms, true);
    else if (key == "fixed_ms") positive(cm.fixed_ms, true);
    else if (key == "per_sequence_ms") positive(cm.per_sequence_ms, true);
    else if (key == "activation_mb_per_token") positive(cm.activation_mb_per_token, false);
    else if (key == "activation_mb_per_token_ckpt") positive(cm.activation_mb_per_token_ckpt, false);
    else if (key == "bytes_per_element") positive(cm.bytes_per_element, false);
    else if (key == "param_bytes") positive(cm.param_bytes, true);
    else if (key == "grad_bytes") positive(cm.grad_bytes, true);
    else if (key == "optim_bytes") positive(cm.optim_bytes, true);
    else if (key == "reserve_gb") positive(cm.reserve_gb, true);
    else if (key == "bw_p2p_intra") positive(cm.bw_p2p_intra_gbs, false);
    else if (key == "bw_p2p_inter") positive(cm.bw_p2p_inter_gbs, false);
    else if (key == "bw_zero_intra") positive(cm.bw_zero_intra_gbs, true);
    else if (key == "bw_zero_inter") positive(cm.bw_zero_inter_gbs, true);
    else if (key == "optimizer_ns_per_param") positive(cm.optimizer_ns_per_param, true);
    else if (key == "bw_h2d") positive(cm.bw_h2d_gbs, false);
    else if (key.rfind("bw_intra_", 0) == 0 || key.rfind("bw_inter_", 0) == 0 ||
             key.rfind("bw_tp_", 0) == 0) {
      const bool intra = key.rfind("bw_intra_", 0) == 0, tp = key.rfind("bw_tp_", 0) == 0;
      const std::string ds = key.substr(tp ? 6 : 9);
      const double d = parse_number(ds, where);
      const int di = static_cast<int>(d);
      FLEXSP_CHECK(di == d && di >= 2 && (di & (di - 1)) == 0,
                   "{}: group size '{}' must be a power of two >= 2", where, ds);
      double bw = 0;
      positive(bw, false);
      auto& table = tp ? cm.bw_tp_gbs : intra ? cm.bw_intra_gbs : cm.bw_inter_gbs;
      bool& given = tp ? bw_tp_given : intra ? bw_intra_given : bw_inter_given;
      if (!given) table.clear();  // a file's table replaces the default one
      given = true;
      table[di] = bw;
    } else {
      fail(fmt::format("{}:{}: unknown key '{}'", source, lineno, key));
    }
  }
  return cm;
}

CostModel cost_model_load(const std::string& path) {
  std::ifstream f(path);
  FLEXSP_CHECK(f.good(), "planner.cost_model: cannot open '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return cost_model_parse(ss.str(), path);
}

std::string cost_model_to_ini(const CostModel& cm, const std::string& header) {
  std::string s;
  std::istringstream h(header);
  for (std::string line; std::getline(h, line);) s += "# " + line + "\n";
  s += "[cost_model]\n";
  s += fmt::format("model = {}\n", cm.model);
  s += "# its shape: activation figures are scaled by hidden x layers to the planned model\n";
  s += fmt::format("model_hidden = {}\nmodel_layers = {}\n", cm.model_hidden, cm.model_layers);
  s += "# time(s, d) = (a1 s^2 + a2 s) / d + per_sequence + a2a_bytes(s) / (d bw(d)); per GPU, ms\n";
  s += fmt::format("a1_ms = {:.6g}\n", cm.a1_ms);
  s += fmt::format("a2_ms = {:.6g}\n", cm.a2_ms);
  s += "# paid per sequence by every rank of its group, whatever its length\n";
  s += fmt::format("per_sequence_ms = {:.6g}\n", cm.per_sequence_ms);
  s += "# paid once per micro-batch by every rank\n";
  s += fmt::format("fixed_ms = {:.6g}\n", cm.fixed_ms);
  s += "# activation memory per token (MB = 1e6 bytes), without / with activation checkpointing\n";
  s += fmt::format("activation_mb_per_token = {:.6g}\n", cm.activation_mb_per_token);
  s += fmt::format("activation_mb_per_token_ckpt = {:.6g}\n", cm.activation_mb_per_token_ckpt);
  s += "# bytes per element of the all-to-all payload; model-state bytes per parameter\n";
  s += fmt::format("bytes_per_element = {:.6g}\n", cm.bytes_per_element);
  s += fmt::format("param_bytes = {:.6g}\n", cm.param_bytes);
  s += fmt::format("grad_bytes = {:.6g}\n", cm.grad_bytes);
  s += fmt::format("optim_bytes = {:.6g}\n", cm.optim_bytes);
  s += fmt::format("reserve_gb = {:.6g}\n", cm.reserve_gb);
  s += "# all-to-all bandwidth per GPU (GB/s = 1e9 bytes/s) by group size, inside a node / across nodes\n";
  for (const auto& [d, bw] : cm.bw_intra_gbs) s += fmt::format("bw_intra_{} = {:.6g}\n", d, bw);
  for (const auto& [d, bw] : cm.bw_inter_gbs) s += fmt::format("bw_inter_{} = {:.6g}\n", d, bw);
  s += "# tensor-parallel all-gather / reduce-scatter bandwidth per GPU (GB/s) by tp size\n";
  for (const auto& [d, bw] : cm.bw_tp_gbs) s += fmt::format("bw_tp_{} = {:.6g}\n", d, bw);
  s += "# point-to-point bandwidth per GPU (GB/s): ring shifts, pipeline stage boundaries\n";
  s += fmt::format("bw_p2p_intra = {:.6g}\nbw_p2p_inter = {:.6g}\n", cm.bw_p2p_intra_gbs, cm.bw_p2p_inter_gbs);
  s += "# per step: ZeRO's all-reduce / reduce-scatter / all-gather rings per GPU (GB/s; 0: from the\n"
       "# all-to-all table), inside a node / across nodes, and the optimizer (AdamW and gradient\n"
       "# norm) per element of the rank's shard (ns; 0: not priced)\n";
  s += fmt::format("bw_zero_intra = {:.6g}\nbw_zero_inter = {:.6g}\n", cm.bw_zero_intra_gbs, cm.bw_zero_inter_gbs);
  s += fmt::format("optimizer_ns_per_param = {:.6g}\n", cm.optimizer_ns_per_param);
  s += "# copies between a GPU and pinned host memory per GPU, all of a node's at once (GB/s): activation offload\n";
  s += fmt::format("bw_h2d = {:.6g}\n", cm.bw_h2d_gbs);
  return s;
}

double cost_comm_bytes(const CostModel& cm, const ModelConfig& m, int64_t s) {
  // q and the attention output are q_dim wide, k and v kv_dim wide.
  const double per_token_layer = 2.0 * m.q_dim() + 2.0 * m.kv_dim();
  const double passes = m.checkpoint_activations ? 3.0 : 2.0;
  return passes * m.layers * per_token_layer * cm.bytes_per_element * static_cast<double>(s);
}

double cost_ring_bytes_per_token(const CostModel& cm, const ModelConfig& m, int kv_heads) {
  const double passes = m.checkpoint_activations ? 4.0 : 3.0;  // k, v fwd; k, v, dk, dv bwd; recompute
  return passes * m.layers * 2.0 * kv_heads * m.head_dim * cm.bytes_per_element;
}

double cost_pp_bytes_per_token(const CostModel& cm, const ModelConfig& m) {
  return 2.0 * m.hidden * cm.bytes_per_element;
}

double cost_p2p_bandwidth_gbs(const CostModel& cm, bool inter) {
  return inter ? cm.bw_p2p_inter_gbs : cm.bw_p2p_intra_gbs;
}

double cost_tp_bytes_per_token(const CostModel& cm, const ModelConfig& m, int tp) {
  if (tp <= 1) return 0;
  // Per layer and token, [hidden]-wide rows: forward all-gathers 2 norm outputs
  // (activations) and reduce-scatters 2 fp32 partial sums; backward all-gathers the 2
  // output gradients and the 2 norm outputs again, and reduce-scatters 2 input gradients;
  // a recomputed forward (checkpointing) repeats the forward's. Embedding and head: one
  // reduce-scatter and one all-gather each way. Each moves (tp - 1) / tp of the rows.
  const double act = cm.bytes_per_element, f32 = 4;
  const double fwd = 2 * act + 2 * f32, bwd = 4 * act + 2 * f32;
  const double per_layer = (m.checkpoint_activations ? 2 : 1) * fwd + bwd;
  const double ends = 2 * (act + f32);
  return (m.layers * per_layer + ends) * m.hidden * (tp - 1.0) / tp;
}

double cost_tp_bandwidth_gbs(const CostModel& cm, int tp) {
  double bw = 0;
  int best = 0;
  for (const auto& [k, v] : cm.bw_tp_gbs)  // nearest listed size, the smaller on ties
    if (best == 0 || std::abs(std::log2(double(k) / tp)) < std::abs(std::log2(double(best) / tp)))
      best = k, bw = v;
  return best != 0 ? bw : cost_bandwidth_gbs(cm, tp, false);
}

double cost_bandwidth_gbs(const CostModel& cm, int d, bool inter) {
  // Nearest listed size in log2 distance; ties go to the smaller size (slower: prudent).
  auto nearest = [d](const std::map<int, double>& t, double* out) {
    int best = 0;
    double bestdist = 1e300;
    for (const auto& [k, bw] : t) {
      const double dist = std::fabs(std::log2(double(k)) - std::log2(double(d)));
      if (dist < bestdist) bestdist = dist, best = k, *out = bw;
    }
    return best != 0;
  };
  double bw = 0;
  if (nearest(inter ? cm.bw_inter_gbs : cm.bw_intra_gbs, &bw)) return bw;
  FLEXSP_CHECK(nearest(inter ? cm.bw_intra_gbs : cm.bw_inter_gbs, &bw),
               "{}: no all-to-all bandwidth (bw_intra_D / bw_inter_D) given", cm.source);
  return bw;
}

double cost_model_state_bytes(const CostModel& cm, const ModelConfig& m, const ZeroLayout& z) {
  const double p = static_cast<double>(model_num_params(m));
  const double pg = z.stage >= 3 ? std::max(1, z.param_group) : 1;
  const double gg = z.stage >= 2 ? std::max(1, z.grad_group) : 1;
  const double og = z.stage >= 1 ? std::max(1, z.optim_group) : 1;
  return p * (cm.param_bytes / pg + cm.grad_bytes / gg + cm.optim_bytes / og);
}

double cost_activation_bytes_per_token(const CostModel& cm, const ModelConfig& m) {
  const bool ckpt = m.checkpoint_activations;
  auto per_token = [ckpt](double h, double l) { return ckpt ? h * (2 * l + 34) : 34 * h * l; };
  const double scale = cm.model_hidden > 0 && cm.model_layers > 0 && m.hidden > 0
                           ? per_token(m.hidden, m.layers) / per_token(cm.model_hidden, cm.model_layers)
                           : 1.0;
  return 1e6 * scale * (ckpt ? cm.activation_mb_per_token_ckpt : cm.activation_mb_per_token);
}

}  // namespace flexsp
