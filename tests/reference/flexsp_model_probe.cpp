// flexsp_model_probe: runs flexsp's model on one packed batch and writes what the
// independent PyTorch reference (tests/reference/llama_ref.py) writes, for compare.py.
//
//   flexsp_model_probe --weights W.h5 --batch B.h5 --out O.h5
//                      [--adamw lr,beta1,beta2,eps,wd] [--checkpoint-activations]
//
// Input: W.h5 in the weights layout (io/weights), B.h5 with /tokens int32 [T] and
// /cu_seqlens int64 [n+1]; positions restart in every sequence, position i predicts token
// i+1, the last position of a sequence predicts nothing.
// Output: /loss (float64, mean cross-entropy), /num_predictions (int64), /logits float32
// [T, vocab], /rope_inv_freq float64 [head_dim/2] (the RoPE table, lib/model/rope.h),
// /grad/<HF name> (gradient of the mean loss), and with --adamw
// /adamw/<HF name>: the weights after one AdamW step (step 1, no decay on norm weights,
// no clipping).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "io/hdf5/h5.h"
#include "io/weights/weights.h"
#include "lib/backend/backend.h"
#include "lib/model/llama.h"
#include "lib/model/rope.h"
#include "lib/optim/optim.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

struct Args {
  std::string weights, batch, out;
  bool adamw = false, checkpoint = false;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      FLEXSP_CHECK(i + 1 < argc, "{} needs a value", k);
      return argv[++i];
    };
    if (k == "--weights") a.weights = value();
    else if (k == "--batch") a.batch = value();
    else if (k == "--out") a.out = value();
    else if (k == "--checkpoint-activations") a.checkpoint = true;
    else if (k == "--adamw") {
      const std::string v = value();
      a.adamw = true;
      FLEXSP_CHECK(std::sscanf(v.c_str(), "%lf,%lf,%lf,%lf,%lf", &a.lr, &a.beta1, &a.beta2, &a.eps,
                               &a.wd) == 5,
                   "--adamw: expected lr,beta1,beta2,eps,wd, got '{}'", v);
    } else {
      fail(fmt::format("unknown argument '{}' (usage: flexsp_model_probe --weights W.h5 --batch "
                       "B.h5 --out O.h5 [--adamw lr,b1,b2,eps,wd] [--checkpoint-activations])",
                       k));
    }
  }
  FLEXSP_CHECK(!a.weights.empty() && !a.batch.empty() && !a.out.empty(),
               "--weights, --batch and --out are required");
  return a;
}

template <class T>
std::vector<T> read_1d(hid_t file, const std::string& name, hid_t mem_type,
                       const std::string& path) {
  FLEXSP_CHECK(h5::exists(file, name), "{}: dataset /{} is missing", path, name);
  h5::Id ds = h5::open_dataset(file, name);
  std::vector<T> v(static_cast<size_t>(h5::extent_1d(ds.get(), name)));
  h5::Quiet q;
  h5::check_status(H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                   fmt::format("{}: cannot read /{}", path, name));
  return v;
}

// A dataset of `dims` (none: a scalar) from v.
void write_data(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* v,
                const std::vector<hsize_t>& dims = {}) {
  h5::Quiet q;
  h5::Id space = h5::space_id(h5::check(
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      "cannot create a dataspace"));
  h5::Id ds = h5::dataset_id(h5::check(
      H5Dcreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      fmt::format("cannot create /{}", name)));
  h5::check_status(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v),
                   fmt::format("cannot write /{}", name));
}

h5::Id make_group(hid_t loc, const char* name) {
  h5::Quiet q;
  return h5::group_id(h5::check(H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                fmt::format("cannot create group /{}", name)));
}

int run(const Args& a) {
  ModelConfig cfg = read_weights_config(a.weights);
  cfg.checkpoint_activations = a.checkpoint;
  const ParamTable table = make_param_table(cfg);
  std::vector<float> host(static_cast<size_t>(table.total), 0.0f);
  load_weights(a.weights, cfg, table, host.data());

  h5::Id bf = h5::open_file(a.batch);
  std::vector<int32_t> ids = read_1d<int32_t>(bf.get(), "tokens", H5T_NATIVE_INT32, a.batch);
  std::vector<int64_t> cu64 = read_1d<int64_t>(bf.get(), "cu_seqlens", H5T_NATIVE_INT64, a.batch);
  bf.reset();
  const int64_t T = static_cast<int64_t>(ids.size());
  FLEXSP_CHECK(T > 0 && cu64.size() >= 2 && cu64.front() == 0 && cu64.back() == T,
               "{}: /cu_seqlens must run from 0 to len(/tokens) = {}", a.batch, T);
  std::vector<int32_t> cu(cu64.begin(), cu64.end());
  const int nseq = static_cast<int>(cu.size()) - 1;
  std::vector<int32_t> pos(T), tgt(T);
  packed_positions(cu.data(), nseq, pos.data());
  packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());

  auto be = make_cpu_backend();
  Llama model(*be, cfg, T);
  Buffer<float> params(*be, host.size()), grads(*be, host.size());
  be->copy_from_host(params.get(), host.data(), host.size() * sizeof(float));
  MicroBatch mb{T, ids.data(), pos.data(), tgt.data(), nseq, cu.data()};
  std::vector<float> logits(static_cast<size_t>(T) * cfg.vocab);
  const ForwardResult fr = model.forward(params.get(), mb, nullptr, logits.data());
  const double count = static_cast<double>(fr.predictions);
  const double loss = count > 0 ? fr.loss_sum / count : 0.0;
  model.backward(params.get(), grads.get(), count > 0 ? 1.0 / count : 0.0);
  std::vector<float> g(host.size());
  be->copy_to_host(g.data(), grads.get(), g.size() * sizeof(float));

  h5::NewFile out = h5::create_file(a.out);
  write_data(out.get(), "loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &loss);
  const int64_t np = fr.predictions;
  write_data(out.get(), "num_predictions", H5T_STD_I64LE, H5T_NATIVE_INT64, &np);
  write_f32(out.get(), "logits", logits.data(), {T, cfg.vocab});
  const std::vector<double> inv_freq = rope_inv_freq(cfg);
  write_data(out.get(), "rope_inv_freq", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, inv_freq.data(), {inv_freq.size()});
  write_tensors(make_group(out.get(), "grad").get(), table, g.data());
  if (a.adamw) {
    OptimSection o;
    o.lr = a.lr;
    o.beta1 = a.beta1;
    o.beta2 = a.beta2;
    o.eps = a.eps;
    o.weight_decay = a.wd;
    AdamW opt(*be, table);
    opt.step(params.get(), grads.get(), o, a.lr, 1.0);
    be->copy_to_host(host.data(), params.get(), host.size() * sizeof(float));
    write_tensors(make_group(out.get(), "adamw").get(), table, host.data());
  }
  out.close_or_throw(fmt::format("{}: cannot close", a.out));
  std::printf("flexsp_model_probe: T %lld, %d sequences, loss %.9f over %lld predictions\n",
              static_cast<long long>(T), nseq, loss, static_cast<long long>(np));
  return 0;
}

}  // namespace
}  // namespace flexsp

int main(int argc, char** argv) {
  try {
    return flexsp::run(flexsp::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flexsp_model_probe: error: %s\n", e.what());
    return 1;
  }
}
