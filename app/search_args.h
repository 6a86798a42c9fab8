// What `flexsp plan --search` and `flexsp simulate --search` share: the search
// options, the SearchSetup they make from the plan options, and the printing of a search
// (the ranked table, why the best wins, the best static-SP layout and FlexSP's paper
// layout beside it, the INI fragment for `flexsp train --config`).
#pragma once

#include <boost/program_options.hpp>

#include <string>
#include <vector>

#include "app/plan_args.h"
#include "lib/planner/analysis/layout_search.h"

namespace flexsp {

struct SearchArgs {
  bool search = false;
  std::string ini;  // write the best layout here (INI fragment)
  int top = 10;
  std::string tp = "1,2,4,8", zero = "0,1,2,3", checkpoint = "both", micro_batch_tokens = "0,4096,16384";
  std::string pp = "1,2,4", pp_schedule = "1f1b,seq1f1b", seq_chunks = "4", cp_mode = "ulysses,auto";
};

void add_search_options(boost::program_options::options_description& o, SearchArgs& s);

// The setup of a search on gpus GPUs; the space from the search options, the batch from
// the plan options (default_seqs when none is given). fabric and fixed as simulate's.
SearchSetup make_search_setup(const PlanArgs& a, const SearchArgs& s, const PlanInputs& in, int gpus,
                              int64_t default_seqs, const SimFabric& fabric, const SimFixedSplit& fixed,
                              double peak_tflops);

// Runs the search and prints it (text, or JSON with a.json); writes s.ini when given.
void run_search(const PlanArgs& a, const SearchArgs& s, const SearchSetup& setup, const PlanInputs& in);

// flexsp simulate --search: the search at every node count of `nodes` (GPUs = nodes x
// a.gpus_per_node), the batch grown with the GPUs as under weak scaling (base: the plan
// options' batch at the first count, else 8 sequences per GPU); one row per node count --
// the best layout, its figures, FlexSP's paper layout beside it -- or what does not fit.
void run_search_sweep(const PlanArgs& a, const SearchArgs& s, const PlanInputs& in, const std::vector<int>& nodes,
                      const SimFabric& fabric, const SimFixedSplit& fixed, double peak_tflops);

}  // namespace flexsp
