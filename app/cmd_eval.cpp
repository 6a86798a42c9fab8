// flexsp eval: mean next-token loss of a model file (checkpoint or weights file) over a
// dataset (docs/commands.md, docs/batches.md). Every document in file order (or the first
// --max-docs) is cut into pieces of at most max_seq_len + 1 tokens overlapping by one
// (split_document, as training does), so every target counts once; documents under 2 tokens
// have none.
//
// Design: the pieces are split over the ranks in contiguous blocks of about equal token
// count; each rank packs its block into micro-batches of up to --batch-tokens tokens and
// runs the model's forward (CPU backend, activation checkpointing on: forward only, so
// the workspace stays small). Loss sums and prediction counts are all-reduced in double,
// so any rank count gives the same mean up to summation order. Start-up and the
// evaluation itself (which has no collectives) run inside agree(): bad input anywhere
// ends every rank with one line.
//
// --by-length: the same loss per bucket of document length (tokens of the whole document,
// not of its pieces; default buckets <=1K, 1K-4K, 4K-16K, 16K-64K, longer): what tells
// whether a context extension worked (long documents' loss falls). A micro-batch then
// holds pieces of one bucket only, so each forward's loss sum belongs to one bucket.
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "io/dataset/data_sources.h"
#include "io/dataset/token_dataset.h"
#include "io/export/model_file.h"
#include "lib/backend/backend.h"
#include "lib/data/sampler.h"
#include "lib/model/llama.h"
#include "lib/runtime/micro_batch.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

struct EvalArgs {
  std::string checkpoint, data, buckets = "1024,4096,16384,65536";
  int64_t max_docs = 0, max_seq_len = 0, batch_tokens = 8192;
  bool json = false, by_length = false;
};

po::options_description eval_options(EvalArgs& a) {
  po::options_description o("flexsp eval options");
  o.add_options()
      ("help,h", "this help")
      ("checkpoint", po::value(&a.checkpoint), "model file: a checkpoint or a weights file (--dump-weights)")
      ("data", po::value(&a.data), "token dataset (a file, a comma-separated list or a glob)")
      ("max-docs", po::value(&a.max_docs), "evaluate the first N documents only (default: all)")
      ("max-seq-len", po::value(&a.max_seq_len),
       "cut documents into pieces of max-seq-len + 1 tokens (default: the checkpoint's "
       "data.max_seq_len; required for a weights file)")
      ("batch-tokens", po::value(&a.batch_tokens)->default_value(a.batch_tokens),
       "tokens per forward pass at most (memory; the result changes only in summation order)")
      ("by-length", po::bool_switch(&a.by_length), "also the loss per bucket of document length")
      ("length-buckets", po::value(&a.buckets)->default_value(a.buckets),
       "upper bounds (tokens, increasing) of the --by-length buckets; one more bucket holds the longer")
      ("json", po::bool_switch(&a.json), "print one JSON object");
  return o;
}

// "<=1K", "1K-4K", ">64K": bucket b of upper bounds `edges` (multiples of 1024 as K).
std::string bucket_label(const std::vector<int64_t>& edges, size_t b) {
  auto n = [](int64_t x) { return x % 1024 == 0 ? fmt::format("{}K", x / 1024) : std::to_string(x); };
  if (b == 0) return fmt::format("<={}", n(edges[0]));
  if (b == edges.size()) return fmt::format(">{}", n(edges.back()));
  return fmt::format("{}-{}", n(edges[b - 1]), n(edges[b]));
}

// Per bucket: loss sum, predictions, documents, tokens (one row of four doubles each).
constexpr int kBucketFields = 4;

// Pieces [begin, end) of rank r: contiguous, about tokens / size each.
std::pair<size_t, size_t> rank_block(const std::vector<SeqRef>& pieces, int rank, int size) {
  int64_t total = 0;
  for (const SeqRef& s : pieces) total += s.length;
  auto boundary = [&](int r) {
    const int64_t target = total * r / size;  // first piece starting at or after target
    int64_t at = 0;
    size_t i = 0;
    while (i < pieces.size() && at < target) at += pieces[i++].length;
    return i;
  };
  return {boundary(rank), rank + 1 == size ? pieces.size() : boundary(rank + 1)};
}

// What eval reads: the model, the dataset, its pieces and the length buckets.
struct EvalInput {
  ModelFile model;
  std::unique_ptr<TokenDataset> ds;
  std::vector<SeqRef> pieces;
  std::vector<int64_t> edges;  // bucket upper bounds
  int64_t docs = 0;
};

// Checks the arguments and reads the input (local; call inside agree()).
void read_eval_input(EvalArgs& a, const po::variables_map& vm, EvalInput& in) {
  in.edges = parse_int_list(a.buckets, "eval: --length-buckets", 1, int64_t{1} << 40, "a token count >= 1");
  FLEXSP_CHECK(std::is_sorted(in.edges.begin(), in.edges.end()) &&
                   std::adjacent_find(in.edges.begin(), in.edges.end()) == in.edges.end(),
               "eval: --length-buckets: '{}' is not increasing", a.buckets);
  FLEXSP_CHECK(!a.checkpoint.empty(), "eval: --checkpoint is required (see flexsp eval --help)");
  FLEXSP_CHECK(!a.data.empty(), "eval: --data is required (see flexsp eval --help)");
  FLEXSP_CHECK(!vm.count("max-docs") || a.max_docs >= 1, "eval: --max-docs must be >= 1, got {}", a.max_docs);
  FLEXSP_CHECK(!vm.count("max-seq-len") || a.max_seq_len >= 1, "eval: --max-seq-len must be >= 1, got {}",
               a.max_seq_len);
  in.model = read_model_file(a.checkpoint, true);
  if (!vm.count("max-seq-len")) {
    FLEXSP_CHECK(in.model.max_seq_len > 0,
                 "{}: holds no run config (a weights file?): give --max-seq-len", a.checkpoint);
    a.max_seq_len = in.model.max_seq_len;
  }
  FLEXSP_CHECK(a.batch_tokens >= a.max_seq_len + 1,
               "eval: --batch-tokens {} is smaller than one piece (max-seq-len + 1 = {})", a.batch_tokens,
               a.max_seq_len + 1);
  in.ds = std::make_unique<TokenDataset>(TokenDataset::open(expand_data_path(a.data)));
  FLEXSP_CHECK(in.ds->vocab_size() <= in.model.config.vocab,
               "{}: dataset vocab_size {} does not fit the model's vocab {} in {}", in.ds->files().front(),
               in.ds->vocab_size(), in.model.config.vocab, a.checkpoint);
  in.docs = vm.count("max-docs") ? std::min(a.max_docs, in.ds->num_docs()) : in.ds->num_docs();
  for (int64_t d = 0; d < in.docs; ++d) {
    const int64_t n = in.ds->doc_length(d);
    if (n < 2) continue;
    for (const SeqRef& s : split_document(d, n, a.max_seq_len)) in.pieces.push_back(s);
  }
  FLEXSP_CHECK(!in.pieces.empty(), "{}: no document with at least 2 tokens in the first {}", a.data, in.docs);
}

// This rank's sums over its block of pieces: loss, predictions, tokens; per length bucket
// too (kBucketFields each). Local: no collectives, so agree() can end all ranks cleanly
// on a bad token.
struct EvalSums {
  double all[3] = {0, 0, 0};
  std::vector<double> by;
};

void evaluate_block(const EvalArgs& a, EvalInput& in, int rank, int size, EvalSums& out) {
  const auto [begin, end] = rank_block(in.pieces, rank, size);
  if (begin == end) return;
  auto bucket_of = [&](const SeqRef& s) {
    const int64_t n = in.ds->doc_length(s.doc);
    return static_cast<size_t>(std::lower_bound(in.edges.begin(), in.edges.end(), n) - in.edges.begin());
  };
  auto be = make_cpu_backend();
  ModelConfig mc = in.model.config;
  mc.checkpoint_activations = true;
  Llama llama(*be, mc, a.batch_tokens);
  Buffer<float> params(*be, static_cast<size_t>(in.model.table.total));
  be->copy_from_host(params.get(), in.model.params.data(), params.bytes());
  in.model.params = {};
  HostMicroBatch hmb;
  std::vector<SeqRef> mb;
  // Without --by-length every piece is in bucket 0 here: micro-batches as full as fit.
  auto bucket = [&](const SeqRef& s) { return a.by_length ? bucket_of(s) : size_t{0}; };
  auto flush = [&] {
    if (mb.empty()) return;
    load_micro_batch(*in.ds, mb, mc.vocab, hmb);
    const ForwardResult r = llama.forward(params.get(), hmb.view());
    double* row = &out.by[bucket(mb.front()) * kBucketFields];
    out.all[0] += r.loss_sum;
    out.all[1] += static_cast<double>(r.predictions);
    row[0] += r.loss_sum;
    row[1] += static_cast<double>(r.predictions);
    for (const SeqRef& s : mb) {
      out.all[2] += static_cast<double>(s.length);
      row[2] += s.start == 0;  // a document counts once: with its first piece
      row[3] += static_cast<double>(s.length);
    }
    mb.clear();
  };
  int64_t tokens = 0;
  for (size_t i = begin; i < end; ++i) {
    const SeqRef& p = in.pieces[i];
    if (tokens + p.length > a.batch_tokens || (!mb.empty() && bucket(mb.front()) != bucket(p)))
      flush(), tokens = 0;
    mb.push_back(p);
    tokens += p.length;
  }
  flush();
}

void print_eval_json(const EvalArgs& a, const EvalInput& in, const EvalSums& s, int ranks) {
  const double loss = s.all[1] > 0 ? s.all[0] / s.all[1] : 0;
  nlohmann::json j = {{"checkpoint", a.checkpoint}, {"data", a.data}, {"documents", in.docs},
                      {"pieces", in.pieces.size()}, {"tokens", static_cast<int64_t>(s.all[2])},
                      {"predictions", static_cast<int64_t>(s.all[1])}, {"loss", loss},
                      {"perplexity", std::exp(loss)}, {"max_seq_len", a.max_seq_len}, {"ranks", ranks}};
  if (a.by_length) {
    j["by_length"] = nlohmann::json::array();
    const std::vector<int64_t>& edges = in.edges;
    for (size_t b = 0; b <= edges.size(); ++b) {
      const double* row = &s.by[b * kBucketFields];
      const double l = row[1] > 0 ? row[0] / row[1] : 0;
      j["by_length"].push_back(
          {{"bucket", bucket_label(edges, b)}, {"min_length", b == 0 ? 0 : edges[b - 1] + 1},
           {"max_length", b < edges.size() ? nlohmann::json(edges[b]) : nlohmann::json(nullptr)},
           {"documents", static_cast<int64_t>(row[2])}, {"tokens", static_cast<int64_t>(row[3])},
           {"predictions", static_cast<int64_t>(row[1])},
           {"loss", row[1] > 0 ? nlohmann::json(l) : nlohmann::json(nullptr)},
           {"perplexity", row[1] > 0 ? nlohmann::json(std::exp(l)) : nlohmann::json(nullptr)}});
    }
  }
  std::printf("%s\n", j.dump().c_str());
}

void print_eval_text(const EvalArgs& a, const EvalInput& in, const EvalSums& s, int ranks) {
  const double loss = s.all[1] > 0 ? s.all[0] / s.all[1] : 0;
  std::printf("eval: %s on %s: %lld documents, %zu pieces (max_seq_len %lld), %lld tokens, %d ranks\n",
              a.checkpoint.c_str(), a.data.c_str(), static_cast<long long>(in.docs), in.pieces.size(),
              static_cast<long long>(a.max_seq_len), static_cast<long long>(s.all[2]), ranks);
  std::printf("mean loss %.12g over %lld predictions (perplexity %.6g)\n", loss,
              static_cast<long long>(s.all[1]), std::exp(loss));
  if (!a.by_length) return;
  std::printf("by document length (tokens):\n  %-12s %10s %12s %12s %11s\n", "length", "documents",
              "predictions", "mean loss", "perplexity");
  for (size_t b = 0; b <= in.edges.size(); ++b) {
    const double* row = &s.by[b * kBucketFields];
    const std::string l = row[1] > 0 ? fmt::format("{:.6f}", row[0] / row[1]) : "-";
    const std::string p = row[1] > 0 ? fmt::format("{:.4g}", std::exp(row[0] / row[1])) : "-";
    std::printf("  %-12s %10lld %12lld %12s %11s\n", bucket_label(in.edges, b).c_str(),
                static_cast<long long>(row[2]), static_cast<long long>(row[1]), l.c_str(), p.c_str());
  }
}

}  // namespace

int cmd_eval(const CommandContext& ctx, const Args& args) {
  EvalArgs a;
  po::variables_map vm;
  const po::options_description opts = eval_options(a);
  agree(ctx.world, [&] { parse_verb_options("eval", args, opts, vm); });
  if (vm.count("help")) {
    if (ctx.rank == 0)
      std::cout << "usage: [mpirun -np N] flexsp eval --checkpoint C --data D [--max-docs N] "
                   "[--max-seq-len S] [--by-length [--length-buckets B1,B2,...]] [--json]\n\n" << opts << "\n";
    return 0;
  }
  EvalInput in;
  agree(ctx.world, [&] { read_eval_input(a, vm, in); });
  EvalSums sums;
  sums.by.assign((in.edges.size() + 1) * kBucketFields, 0.0);
  agree(ctx.world, [&] { evaluate_block(a, in, ctx.rank, ctx.size, sums); });
  MPI_Allreduce(MPI_IN_PLACE, sums.all, 3, MPI_DOUBLE, MPI_SUM, ctx.world);
  MPI_Allreduce(MPI_IN_PLACE, sums.by.data(), static_cast<int>(sums.by.size()), MPI_DOUBLE, MPI_SUM,
                ctx.world);
  if (ctx.rank != 0) return 0;
  if (a.json)
    print_eval_json(a, in, sums, ctx.size);
  else
    print_eval_text(a, in, sums, ctx.size);
  return 0;
}

}  // namespace flexsp
