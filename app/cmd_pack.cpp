// flexsp pack: corpus -> token dataset (docs/commands.md, docs/datasets.md). The work is
// io/pack; this file is the command line. Under mpirun every rank tokenizes a share of
// the inputs and rank 0 writes the one dataset (io/pack/pack.h); the options are parsed
// and the tokenizer loaded inside agree(), and pack() agrees on its own phases, so bad
// input on any rank ends every rank with one line.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "io/pack/pack.h"
#include "io/tokenizer/tokenizer.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

const char* kUsage =
    "usage: flexsp pack --out FILE.h5 [--tokenizer bytes | --sp-model M.model | --hf-tokenizer DIR]\n"
    "                   [--bos] [options] INPUT...\n"
    "\n"
    "Packs text files, directories (recursively), JSON lines files (*.jsonl: one\n"
    "{\"text\": \"...\"} or {\"tokens\": [ids]} per line) and 1-D integer .npy arrays into an\n"
    "HDF5 token dataset. Every file (every JSON line) is one document, followed by EOS;\n"
    "empty documents are skipped. Inputs are read in the order given, directories in\n"
    "sorted path order, so the same corpus always gives the same dataset.\n"
    "For a HuggingFace LLaMA 1/2: --sp-model HF_DIR/tokenizer.model --bos; for Llama 3, Qwen,\n"
    "GPT-2 and other byte-level BPE models: --hf-tokenizer HF_DIR (its tokenizer.json) --bos.\n";

void print_stats(const char* prefix, const PackStats& s) {
  std::printf("%s%lld files, %lld documents, %lld tokens, %.1f MB read in %.1f s\n", prefix,
              static_cast<long long>(s.files), static_cast<long long>(s.documents),
              static_cast<long long>(s.tokens), s.bytes_read / 1e6, s.seconds);
  std::fflush(stdout);
}

}  // namespace

int cmd_pack(const CommandContext& ctx, const Args& args) {
  PackOptions opts;
  bool help = false;
  std::unique_ptr<Tokenizer> tok;
  agree(ctx.world, [&] {
    std::string tokenizer, sp_model, hf_tokenizer;
    po::options_description desc("options");
    // clang-format off
    desc.add_options()
        ("out,o", po::value(&opts.out)->value_name("FILE"), "the dataset to write (.h5)")
        ("tokenizer", po::value(&tokenizer)->value_name("NAME")->default_value("bytes"),
         "bytes (ids = byte values, EOS 256), sentencepiece or hf")
        ("sp-model", po::value(&sp_model)->value_name("M.model"),
         "the sentencepiece model (implies --tokenizer sentencepiece); for a HuggingFace LLaMA "
         "folder: DIR/tokenizer.model")
        ("hf-tokenizer", po::value(&hf_tokenizer)->value_name("DIR|FILE"),
         "a Hugging Face byte-level BPE tokenizer: its tokenizer.json, or the model folder "
         "holding it (implies --tokenizer hf; BOS/EOS from tokenizer_config.json beside it "
         "or the file's post-processor)")
        ("bos", po::bool_switch(&opts.bos),
         "start every document with the tokenizer's BOS id (LLaMA models expect it)")
        ("glob", po::value(&opts.glob)->value_name("PATTERN"),
         "only files whose name matches, inside directories (e.g. '*.h'); default all")
        ("jsonl", po::bool_switch(&opts.jsonl), "read every input file as JSON lines")
        ("compression", po::value(&opts.compression)->value_name("0-9")->default_value(0),
         "gzip level of /tokens and /offsets (0 = none)")
        ("chunk-tokens", po::value(&opts.chunk_tokens)->value_name("N"),
         "tokens per HDF5 chunk (default 1048576; 65536 when compressed, for fast random "
         "reads)")
        ("force,f", po::bool_switch(&opts.force), "overwrite an existing output file")
        ("help,h", po::bool_switch(&help), "print this help");
    // clang-format on
    po::options_description hidden;
    hidden.add_options()("input", po::value(&opts.inputs));
    po::options_description all;
    all.add(desc).add(hidden);
    po::positional_options_description pos;
    pos.add("input", -1);
    po::variables_map vm;
    parse_verb_options("pack", args, all, vm, &pos);
    if (help) {
      if (ctx.rank == 0) {
        std::printf("%s\n", kUsage);
        std::cout << desc << std::flush;
      }
      return;
    }
    FLEXSP_CHECK(!opts.out.empty(), "pack: --out FILE is required (see flexsp pack --help)");
    FLEXSP_CHECK(!opts.inputs.empty(), "pack: no INPUT given (see flexsp pack --help)");
    if (!sp_model.empty()) {
      FLEXSP_CHECK(vm["tokenizer"].defaulted() || tokenizer == "sentencepiece",
                   "pack: --sp-model needs --tokenizer sentencepiece (not '{}')", tokenizer);
      tokenizer = "sentencepiece:" + sp_model;
    }
    if (!hf_tokenizer.empty()) {
      FLEXSP_CHECK(sp_model.empty(), "pack: --hf-tokenizer and --sp-model exclude each other");
      FLEXSP_CHECK(vm["tokenizer"].defaulted() || tokenizer == "hf",
                   "pack: --hf-tokenizer needs --tokenizer hf (not '{}')", tokenizer);
      tokenizer = "hf:" + hf_tokenizer;
    }
    tok = make_tokenizer(tokenizer);  // every rank: each tokenizes its share
  });
  if (help) return 0;
  if (ctx.rank == 0) opts.progress = [](const PackStats& s) { print_stats("pack: ", s); };
  const PackStats s = pack(opts, *tok, ctx.world);
  if (ctx.rank != 0) return 0;
  std::printf("wrote %s\n", opts.out.c_str());
  std::printf("  files:       %lld\n", static_cast<long long>(s.files));
  std::printf("  documents:   %lld\n", static_cast<long long>(s.documents));
  std::printf("  skipped:     %lld (empty)\n", static_cast<long long>(s.skipped));
  std::printf("  tokens:      %lld (EOS included)\n", static_cast<long long>(s.tokens));
  std::printf("  bytes read:  %lld (%.1f MB)\n", static_cast<long long>(s.bytes_read), s.bytes_read / 1e6);
  std::printf("  time:        %.2f s (%.1f MB/s, %.2f M tokens/s%s)\n", s.seconds, s.mb_per_s(),
              s.tokens_per_s() / 1e6, ctx.size > 1 ? fmt::format(" on {} ranks", ctx.size).c_str() : "");
  std::printf("  cpu:         reading %.2f-%.2f s per rank (%.2f s on %d), joining %.2f s on rank 0\n",
              s.read_cpu_min, s.read_cpu_max, s.read_cpu_sum, ctx.size, s.join_cpu);
  std::printf("  tokenizer:   %s (vocab_size %d, eos_id %d%s)\n", tok->name().c_str(), tok->vocab_size(),
              tok->eos_id(), opts.bos ? fmt::format(", bos_id {} first", tok->bos_id()).c_str() : "");
  if (const std::string h = tok->sha256(); !h.empty()) std::printf("  sha256:      %s\n", h.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace flexsp
