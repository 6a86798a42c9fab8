// Reading the model out of a flexsp weights file (`flexsp train --dump-weights`, schema
// "flexsp.weights") or checkpoint (schema "flexsp.checkpoint"): both hold the same /model
// group (docs/checkpoints.md), read with io/weights. A checkpoint also carries the run's
// config as an INI string in the root attribute `config`, from which data.max_seq_len is
// taken; a weights file has none, so tools then need it from the user (max_seq_len = 0
// here). Serial HDF5, host memory: used by the one-process tools (eval, export).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

struct ModelFile {
  std::string path, schema;    // schema: the root attribute ("" when absent)
  ModelConfig config;          // from the attributes of /model
  ParamTable table;            // make_param_table(config)
  int64_t max_seq_len = 0;     // data.max_seq_len of the stored run config; 0: none stored
  std::vector<float> params;   // flat layout of `table`; empty unless read with weights
};

// Opens path and reads the config (and, with weights = true, every tensor). Throws Error
// naming the file: missing, not HDF5, no /model, bad attributes, a missing or misshapen
// tensor, an unreadable stored config.
ModelFile read_model_file(const std::string& path, bool weights);

}  // namespace flexsp
