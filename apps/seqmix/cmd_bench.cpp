// seqmix bench: the operator and whole-model benchmarks (bench/ops_bench.h,
// bench/models_bench.h), as a table or JSON lines.
#include <fmt/format.h>

#include <cstdio>
#include <utility>
#include <vector>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/bench/models_bench.h"
#include "seqmix/bench/ops_bench.h"
#include "seqmix/util/blas.h"
#include "seqmix/util/memory.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/threads.h"

namespace seqmix::cli {

namespace {

// Each mode's defaults, in the order the help lists them; the options a user gives override
// them one by one.
using Mode = std::pair<std::string, bench::OpsBenchOptions (*)()>;
const std::vector<Mode>& modes() {
  static const std::vector<Mode> m = {
      {"ops", [] { return bench::OpsBenchOptions(); }},
      {"extractor", &bench::OpsBenchOptions::extractor_defaults},
      {"ces", &bench::OpsBenchOptions::ces_defaults},
      {"prefix", &bench::OpsBenchOptions::prefix_defaults}};
  return m;
}

struct BenchFlags {
  bench::OpsBenchOptions options;
  bench::ModelsBenchOptions models;
  std::string plot;
  bool json = false;
  int64_t threads = 0;
  std::string mode;
};

// Keeps a measured row and shows it at once: JSON on stdout, or a progress line on stderr
// ahead of the table.
void report_row(bool json, std::vector<nlohmann::json>& rows, const nlohmann::json& row) {
  rows.push_back(row);
  if (json) {
    fmt::print("{}\n", row.dump());
    std::fflush(stdout);
  } else {
    fmt::print(stderr, "  {}\n", row.dump());
  }
}

// What runs the matrix products at `precision` (checked here, before anything runs).
std::string kernels_description(const std::string& precision) {
  nn::Precision p;
  try {
    p = nn::parse_precision(precision);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--precision: ") + e.what());
  }
  return p == nn::Precision::bf16
             ? "bf16 (" + util::onednn_description() + "; fp32 products: " +
                   util::blas_description() + ")"
             : "fp32 (" + util::blas_description() + ")";
}

// `seqmix bench models` (a training step per length) and `seqmix bench generate` (a decoding
// step per context length) of whole models (bench/models_bench.h).
int run_models(BenchFlags& f, const CLI::App& cmd) {
  const bool generate = f.mode == "generate";
  const std::string name = "bench " + f.mode;
  for (const char* flag : {"--ops", "--heads"})
    if (cmd.count(flag) > 0)
      throw std::invalid_argument(std::string(flag) + ": not an option of `" + name +
                                  "` (it takes --models, --n-heads, --layers, --d-ff)");
  if (generate && !f.plot.empty())
    throw std::invalid_argument("--plot: an option of `bench models` only");
  auto& m = f.models;
  m.precision = f.options.precision;
  if (generate) {
    // Contexts up to 2K: the Extractor's decoding reads t lag matrices per token, so
    // reaching t = 4K at D = 256 alone takes several minutes on 2 cores.
    m.lengths = {128, 256, 512, 1024, 2048};
    m.reps = 16;
    // One thread, as `seqmix generate` decodes: a token's work is too small to share.
    if (cmd.count("--threads") == 0) f.threads = 1;
  }
  if (cmd.count("--L") > 0) m.lengths = f.options.lengths;
  if (cmd.count("--B") > 0) m.batch = f.options.batch;
  if (cmd.count("--D") > 0) m.d_model = f.options.d_model;
  if (cmd.count("--reps") > 0) m.reps = f.options.reps;
  if (!f.plot.empty()) {
    util::check_path_text(f.plot, "--plot");
    if (f.plot.size() < 5 || f.plot.substr(f.plot.size() - 4) != ".png")
      throw std::invalid_argument("--plot: must name a .png file, got '" + f.plot + "'");
  }
  util::check_threads(f.threads, "--threads");
  const int64_t n = util::configure_threads(f.threads);
  bench::check_models_bench_options(m, f.mode);  // before the header line and any run
  const std::string kernels = kernels_description(m.precision);
  if (!f.json)
    fmt::print(stderr,
               "seqmix {}: {}, B={} d_model={} layers={} d_ff={} heads={} reps={} threads={} "
               "device={} {}\n",
               name, generate ? "decoding steps (median of the reps tokens ending at each L)"
                              : "training steps",
               m.batch, m.d_model, m.n_layers, m.d_ff, m.n_heads, m.reps, n, m.device, kernels);
  std::vector<nlohmann::json> rows;
  const auto report = [&](nlohmann::json row) { report_row(f.json, rows, row); };
  if (generate) {
    bench::run_generate_bench(m, report);
    if (!f.json) fmt::print("{}", bench::format_generate_table(rows));
    return 0;
  }
  bench::run_models_bench(m, report);
  if (!f.json) fmt::print("{}", bench::format_models_table(rows));
  if (!f.plot.empty()) {
    bench::plot_models_bench(rows, f.plot);
    fmt::print(stderr, "bench models: plot written to '{}'\n", f.plot);
  }
  return 0;
}

int run_bench(BenchFlags& f, const CLI::App& cmd) {
  // Shapes repeat exactly, case by case, unlike training's padded batches.
  util::set_heap_policy(util::HeapPolicy::kRepeating);
  if (f.mode == "models" || f.mode == "generate") return run_models(f, cmd);
  for (const char* flag : {"--models", "--layers", "--d-ff", "--n-heads", "--plot", "--device"})
    if (cmd.count(flag) > 0)
      throw std::invalid_argument(std::string(flag) +
                                  ": an option of `bench models` and `bench generate` only");
  auto& o = f.options;
  bench::OpsBenchOptions d;
  for (const auto& [name, defaults] : modes())
    if (name == f.mode) d = defaults();
  if (cmd.count("--L") == 0) o.lengths = d.lengths;
  if (cmd.count("--B") == 0) o.batch = d.batch;
  if (cmd.count("--D") == 0) o.d_model = d.d_model;
  if (cmd.count("--ops") == 0) o.ops = d.ops;
  util::check_threads(f.threads, "--threads");
  const int64_t n = util::configure_threads(f.threads);
  std::vector<nlohmann::json> rows;
  const std::string kernels = kernels_description(o.precision);
  if (!f.json)
    fmt::print(stderr, "seqmix bench {}: B={} D={} heads={} reps={} threads={} {}\n", f.mode,
               o.batch, o.d_model, o.n_heads, o.reps, n, kernels);
  bench::run_ops_bench(o, [&](nlohmann::json row) {
    if (row.value("op", "") == "stream_triad") row["blas"] = util::blas_description();
    report_row(f.json, rows, row);
  });
  if (!f.json) fmt::print("{}", bench::format_ops_table(rows));
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench", "benchmark programs (not tests)");
  std::vector<std::string> names;
  for (const auto& m : modes()) names.push_back(m.first);
  names.push_back("models");
  names.push_back("generate");
  cmd->add_option("mode", f->mode,
                  "ops: AIB kernel vs reference vs softmax attention (B=4, D=512, L=1K..16K); "
                  "extractor: Extractor FFT vs literal per-lag sum vs softmax attention "
                  "(B=64, D=128, L=l=128); ces: CES recurrence kernel vs the FFT reference "
                  "(B=4, D=512, L=1K..16K); prefix: aib-net Fig. 3, prefix sums by Algorithm A (sequential) "
                  "vs B (log-depth) in ATen ops (B=4, D=512, L=1K..16K); models: a training step of whole "
                  "models (weird-net, weird-net-a, transformer, etsmlp-lm, extractor-transformer; "
                  "B=1, D=256, 4 layers, L=512..16K), tokens/s and peak memory; generate: "
                  "incremental decoding of the same models, ms per token and state size at "
                  "context L=128..2K (extractor Table 4). Options override the mode's defaults.")
      ->required()
      ->check(CLI::IsMember(names));
  cmd->add_option("--L", f->options.lengths, "sequence lengths")->delimiter(',');
  cmd->add_option("--B", f->options.batch, "batch size");
  cmd->add_option("--D", f->options.d_model, "channels / d_model");
  cmd->add_option("--heads", f->options.n_heads, "attention heads");
  cmd->add_option("--reps", f->options.reps,
                  "timed repetitions (median reported); generate: tokens per L (default 16)");
  std::string ops;
  for (const auto& name : bench::ops_bench_names()) ops += (ops.empty() ? "" : ",") + name;
  cmd->add_option("--ops", f->options.ops, "subset of " + ops)->delimiter(',');
  cmd->add_option("--threads", f->threads, "LibTorch threads (0 = all; generate: default 1)");
  cmd->add_flag("--json", f->json, "one JSON object per line instead of a table");
  cmd->add_option("--precision", f->options.precision,
                  "fp32 or bf16: bfloat16 activations (op rows) or autocast (layers, models)");
  std::string model_names;
  for (const auto& name : bench::models_bench_names())
    model_names += (model_names.empty() ? "" : ",") + name;
  cmd->add_option("--models", f->models.models, "models, generate: subset of " + model_names)
      ->delimiter(',');
  cmd->add_option("--layers", f->models.n_layers, "models, generate: layers of every model");
  cmd->add_option("--d-ff", f->models.d_ff, "models, generate: FFN width (ESMLP: hidden width)");
  cmd->add_option("--n-heads", f->models.n_heads, "models, generate: attention heads");
  cmd->add_option("--plot", f->plot, "models: also draw tokens/s and bytes per token (PNG)");
  cmd->add_option("--device", f->models.device,
                  "models, generate: cpu (default), cuda or cuda:N; on a GPU each step is timed "
                  "to the end of its kernels and the peak is the CUDA allocator's");
  return {cmd, [f, cmd](char**) { return run_bench(*f, *cmd); }};
}

}  // namespace seqmix::cli
