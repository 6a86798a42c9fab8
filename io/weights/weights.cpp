// Weights files (see weights.h). Tensors are stored contiguous (no chunking or
// compression): they are read whole, and float32 data does not compress well.
#include "io/weights/weights.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/hdf5/h5.h"
#include "io/util/atomic_file.h"
#include "lib/util/error.h"

namespace flexsp {

void write_f32(hid_t loc, const std::string& name, const float* data,
               const std::vector<int64_t>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  h5::Quiet q;
  h5::Id space = h5::space_id(h5::check(
      H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      fmt::format("cannot create a dataspace for {}", name)));
  h5::Id ds = h5::dataset_id(h5::check(
      H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                 H5P_DEFAULT),
      fmt::format("cannot create dataset {}", name)));
  h5::check_status(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                   fmt::format("cannot write dataset {}", name));
}

void write_model_attrs(hid_t g, const ModelConfig& c) {
  h5::write_attr(g, "hidden", c.hidden);
  h5::write_attr(g, "layers", c.layers);
  h5::write_attr(g, "heads", c.heads);
  h5::write_attr(g, "kv_heads", c.kv_heads);
  h5::write_attr(g, "ffn", c.ffn);
  h5::write_attr(g, "vocab", c.vocab);
  h5::write_attr(g, "rope_theta", c.rope_theta);
  h5::write_attr(g, "rope_scaling", enum_name(c.rope_scaling));
  h5::write_attr(g, "rope_scaling_factor", c.rope_scaling_factor);
  h5::write_attr(g, "rope_low_freq_factor", c.rope_low_freq_factor);
  h5::write_attr(g, "rope_high_freq_factor", c.rope_high_freq_factor);
  h5::write_attr(g, "rope_original_max_position", c.rope_original_max_position);
  h5::write_attr(g, "norm_eps", c.norm_eps);
  h5::write_attr(g, "tie_embeddings", c.tie_embeddings ? 1 : 0);
}

ModelConfig read_model_attrs(hid_t g) {
  ModelConfig c;
  c.preset = "file";
  auto geti = [g](const char* name) {
    const int64_t v = h5::read_attr_int(g, name);
    FLEXSP_CHECK(v > 0 && v <= (int64_t{1} << 30), "{}: attribute '{}' = {} is out of range",
                 h5::file_name(g), name, v);
    return static_cast<int>(v);
  };
  c.hidden = geti("hidden");
  c.layers = geti("layers");
  c.heads = geti("heads");
  c.kv_heads = geti("kv_heads");
  c.ffn = geti("ffn");
  c.vocab = geti("vocab");
  c.rope_theta = h5::read_attr_double(g, "rope_theta");
  // Files written before RoPE scaling existed have none of these: no scaling.
  if (h5::has_attr(g, "rope_scaling")) {
    const std::string scaling = h5::read_attr_string(g, "rope_scaling");
    const std::optional<RopeScaling> s = enum_parse<RopeScaling>(scaling);
    FLEXSP_CHECK(s, "{}: attribute 'rope_scaling' = '{}' is not one of {}", h5::file_name(g),
                 scaling, enum_choices<RopeScaling>());
    c.rope_scaling = *s;
    c.rope_scaling_factor = h5::read_attr_double(g, "rope_scaling_factor");
    c.rope_low_freq_factor = h5::read_attr_double(g, "rope_low_freq_factor");
    c.rope_high_freq_factor = h5::read_attr_double(g, "rope_high_freq_factor");
    c.rope_original_max_position = geti("rope_original_max_position");
  }
  c.norm_eps = h5::read_attr_double(g, "norm_eps");
  c.tie_embeddings = h5::read_attr_int(g, "tie_embeddings") != 0;
  c.head_dim = c.hidden / c.heads;
  try {
    validate_model_config(c);
  } catch (const Error& e) {
    fail(fmt::format("{}: {}", h5::file_name(g), e.what()));
  }
  return c;
}

// The RoPE fields are not compared: a run may change them (context extension); it takes
// the file's unless its config sets them (lib/model/rope.h, adopt_file_rope).
void check_model_attrs(const ModelConfig& f, const ModelConfig& r, const std::string& what) {
  auto same_i = [&](const char* key, int a, int b) {
    FLEXSP_CHECK(a == b, "{}: model.{} is {} in the file but {} in this run", what, key, a, b);
  };
  auto same_d = [&](const char* key, double a, double b) {
    FLEXSP_CHECK(std::fabs(a - b) <= 1e-12 * std::fabs(b),
                 "{}: model.{} is {} in the file but {} in this run", what, key, a, b);
  };
  same_i("hidden", f.hidden, r.hidden);
  same_i("layers", f.layers, r.layers);
  same_i("heads", f.heads, r.heads);
  same_i("kv_heads", f.kv_heads, r.kv_heads);
  same_i("ffn", f.ffn, r.ffn);
  same_i("vocab", f.vocab, r.vocab);
  same_d("norm_eps", f.norm_eps, r.norm_eps);
  same_i("tie_embeddings", f.tie_embeddings, r.tie_embeddings);
}

void write_tensors(hid_t g, const ParamTable& t, const float* buf) {
  for (const ParamView& v : t.views) write_f32(g, v.name, buf + v.offset, v.shape());
}

void read_tensors(hid_t g, const ParamTable& t, float* buf, const std::string& what) {
  h5::Quiet q;
  for (const ParamView& v : t.views) {
    FLEXSP_CHECK(h5::exists(g, v.name), "{}: tensor {} is missing", what, v.name);
    h5::Id ds = h5::open_dataset(g, v.name);
    h5::Id space = h5::space_id(H5Dget_space(ds.get()));
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    std::vector<hsize_t> dims(rank > 0 ? rank : 0);
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    const std::vector<int64_t> want = v.shape();
    bool ok = rank == static_cast<int>(want.size());
    for (size_t i = 0; ok && i < want.size(); ++i) ok = static_cast<int64_t>(dims[i]) == want[i];
    if (!ok) {
      std::string got;
      for (size_t i = 0; i < dims.size(); ++i) got += (i ? ", " : "") + std::to_string(dims[i]);
      fail(fmt::format("{}: tensor {} has shape [{}], expected [{}]", what, v.name, got,
                       fmt::join(want, ", ")));
    }
    h5::Id type = h5::type_id(H5Dget_type(ds.get()));
    FLEXSP_CHECK(type.valid() && H5Tget_class(type.get()) == H5T_FLOAT,
                 "{}: tensor {} is not floating point", what, v.name);
    h5::check_status(
        H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf + v.offset),
        fmt::format("{}: cannot read tensor {}", what, v.name));
  }
}

void write_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                   const std::function<void(const ParamView&, float*)>& fill) {
  // Written under a temporary name and renamed: an existing file is replaced whole or not
  // at all. Room is checked first (a full disk is found before anything is written); a
  // failure after that discards the temporary file, a failed write reported first.
  uint64_t bytes = 64 << 10;  // HDF5's metadata, generously
  for (const ParamView& v : t.views) bytes += 4 * static_cast<uint64_t>(v.numel()) + 1024;
  check_room(path, bytes, "the weights file");
  const std::string tmp = temp_path(path);
  h5::NewFile file = h5::create_file(tmp);
  h5::Id g;
  try {
    h5::Quiet q;
    h5::write_attr(file.get(), "schema", "flexsp.weights");
    h5::write_attr(file.get(), "schema_version", int64_t{1});
    g = h5::group_id(h5::check(H5Gcreate2(file.get(), "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                               fmt::format("{}: cannot create group /model", path)));
    write_model_attrs(g.get(), c);
    std::vector<float> buf;
    for (const ParamView& v : t.views) {
      buf.resize(static_cast<size_t>(v.numel()));
      fill(v, buf.data());
      write_f32(g.get(), v.name, buf.data(), v.shape());
      file.check_written(path);
    }
    g.reset();
    file.close_or_throw(path);
  } catch (...) {
    file.discard_and_rethrow(path, {&g});
  }
  publish_file(tmp, path);
}

void dump_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                  const float* params) {
  write_weights(path, c, t, [&](const ParamView& v, float* out) {
    std::copy(params + v.offset, params + v.offset + v.numel(), out);
  });
}

namespace {
h5::Id open_model_group(const h5::Id& file, const std::string& path) {
  FLEXSP_CHECK(h5::exists(file.get(), "model"), "{}: no /model group (not a weights file)", path);
  h5::Quiet q;
  return h5::group_id(h5::check(H5Gopen2(file.get(), "model", H5P_DEFAULT),
                                fmt::format("{}: cannot open /model", path)));
}
}  // namespace

ModelConfig read_weights_config(const std::string& path) {
  h5::Id file = h5::open_file(path);
  h5::Id g = open_model_group(file, path);
  return read_model_attrs(g.get());
}

void load_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                  float* params) {
  h5::Id file = h5::open_file(path);
  h5::Id g = open_model_group(file, path);
  check_model_attrs(read_model_attrs(g.get()), c, path);
  read_tensors(g.get(), t, params, path);
}

}  // namespace flexsp
