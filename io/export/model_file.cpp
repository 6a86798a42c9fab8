// See model_file.h. Everything but the stored run config goes through io/weights, so
// weights files and checkpoints are read by the same code as --load-weights.
#include "io/export/model_file.h"

#include <fmt/format.h>

#include "io/hdf5/h5.h"
#include "io/weights/weights.h"
#include "lib/config/config.h"
#include "lib/util/error.h"

namespace flexsp {

ModelFile read_model_file(const std::string& path, bool weights) {
  ModelFile m;
  m.path = path;
  m.config = read_weights_config(path);  // opens the file: names it when missing / not HDF5
  m.table = make_param_table(m.config);
  {
    h5::Id file = h5::open_file(path);
    if (h5::has_attr(file.get(), "schema")) m.schema = h5::read_attr_string(file.get(), "schema");
    if (h5::has_attr(file.get(), "config")) {
      const std::string ini = h5::read_attr_string(file.get(), "config");
      try {
        m.max_seq_len = config_from_ini(ini).data.max_seq_len;
      } catch (const Error& e) {
        fail(fmt::format("{}: root attribute 'config': {}", path, e.what()));
      }
      FLEXSP_CHECK(m.max_seq_len >= 1, "{}: stored data.max_seq_len = {} is not >= 1", path, m.max_seq_len);
    }
  }
  if (weights) {
    m.params.assign(static_cast<size_t>(m.table.total), 0.0f);
    load_weights(path, m.config, m.table, m.params.data());
  }
  return m;
}

}  // namespace flexsp
