// seqmix command-line tool: a thin layer over libseqmix (no model logic lives here).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>

#include "seqmix/bench/ops_bench.h"
#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/listops.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/generate/sampler.h"
#include "seqmix/models/presets.h"
#include "seqmix/data/pathfinder.h"
#include "seqmix/data/tasks.h"
#include "seqmix/train/checkpoint.h"
#include "seqmix/train/classify.h"
#include "seqmix/train/compare.h"
#include "seqmix/train/config.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/plot.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/blas.h"
#include "seqmix/util/files.h"
#include "seqmix/util/memory.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"

namespace {

using seqmix::train::RunConfig;

constexpr const char* kDataDirHelp =
    "folder filled by scripts/setup.sh (default: $SEQMIX_DATA_DIR, else the source tree's "
    "data folder)";

// The integer a user wrote, plainly or as an exact power-of-ten form such as 1e9, into
// `value`; returns "" or why `text` is not one that fits in 64 bits.
std::string read_integer(const std::string& text, int64_t& value) {
  size_t used = 0;
  try {
    value = std::stoll(text, &used);
    if (used == text.size()) return "";
    const double d = std::stod(text, &used);
    if (used == text.size() && std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18) {
      value = static_cast<int64_t>(d);
      return "";
    }
  } catch (const std::out_of_range&) {
    return "expected an integer within +-9223372036854775807, got '" + text + "'";
  } catch (const std::exception&) {
  }
  return "expected an integer, got '" + text + "'";
}

// Options shared by the commands that resolve a configuration. Every flag that was given
// becomes a `section.key=value` override, so the configuration's own checks
// (RunConfig::validate) judge it exactly as they judge --set and TOML: a value that is out of
// range is an error naming the flag, never a silent default.
struct ConfigFlags {
  std::string config_path, model, size, data, data_dir, aib_impl, tokenizer, task;
  // Counts are read as text so that 1e9 means 10^9, as a user writes it; integer() checks it.
  std::optional<std::string> max_steps, seed, batch_size, threads, max_len;
  std::optional<double> lr;
  std::vector<std::string> set;

  void add_to(CLI::App* app) {
    app->add_option("--config", config_path, "TOML config file ([model], [data], [train])")
        ->check(CLI::ExistingFile);
    app->add_option("--model", model,
                    "model preset: weird-net (= aib-net), weird-net-a, moss, transformer, "
                    "extractor-transformer, transformer-plain, etsmlp-lm, etsmlp-gate-lm, ... "
                    "(`seqmix info` lists all)");
    app->add_option("--size", size,
                    "model size: tiny, mini, base, small, medium, large (language modelling); "
                    "cpu (default) or paper with --task");
    app->add_option("--task", task,
                    "classification task instead of language modelling: listops, text, "
                    "retrieval, image, pathfinder, pathx (docs/TASKS.md)");
    app->add_option("--data", data, "corpus: sotu, moby-dick, or a text file/folder path");
    app->add_option("--data-dir", data_dir, kDataDirHelp);
    app->add_option("--tokenizer", tokenizer,
                    "bytes (default) or a SentencePiece model from `seqmix tokenizer train`; "
                    "sets model.vocab_size to its size");
    // No defaults of their own: the preset and the config file decide (--dump-config shows
    // the resolved values).
    app->add_option("--max-steps", max_steps, "optimizer steps (train.max_steps)");
    app->add_option("--seed", seed, "random seed: init, batch order (train.seed)");
    app->add_option("--batch-size", batch_size, "sequences per step (train.batch_size)");
    app->add_option("--lr", lr, "peak learning rate (train.lr)");
    app->add_option("--threads", threads, "intra-op threads, 0 = all (train.threads)");
    app->add_option("--max-len", max_len,
                    "context length in tokens, bytes for byte-level models (model.max_len)");
    app->add_option("--aib-impl", aib_impl, "AIB scan: fused (default) or reference");
    app->add_option("--set", set, "override any key: section.key=value (repeatable)");
  }

  // A count given as text: an integer, or a number in scientific notation that is one
  // (1e9); anything else is an error naming the flag.
  static std::optional<int64_t> integer(const std::optional<std::string>& text, const char* flag) {
    if (!text) return std::nullopt;
    int64_t v = 0;
    if (const std::string why = read_integer(*text, v); !why.empty())
      throw std::invalid_argument(std::string(flag) + ": " + why);
    return v;
  }

  std::vector<std::string> overrides() const {
    if (!task.empty() && !data.empty())
      throw std::invalid_argument("--data does not apply with --task: task '" + task +
                                  "' brings its own data");
    std::vector<std::string> o;
    auto str = [&](const char* key, const std::string& v) {
      if (!v.empty()) o.push_back(std::string(key) + "=" + nlohmann::json(v).dump());
    };
    auto num = [&](const char* key, const auto& v) {
      if (v) o.push_back(std::string(key) + "=" + fmt::format("{}", *v));
    };
    str("model.preset", model);
    str("model.size", size);
    str("data.source", data);
    str("data.task", task);
    str("data.dir", data_dir);
    str("model.aib_impl", aib_impl);
    if (!tokenizer.empty()) {
      str("data.tokenizer", tokenizer);
      const auto tok = tokenizer == "bytes" ? seqmix::data::Tokenizer::bytes()
                                            : seqmix::data::Tokenizer::load(tokenizer);
      num("model.vocab_size", std::optional<int64_t>(tok.vocab_size()));
    }
    num("train.max_steps", integer(max_steps, "--max-steps"));
    num("train.seed", integer(seed, "--seed"));
    num("train.batch_size", integer(batch_size, "--batch-size"));
    num("train.threads", integer(threads, "--threads"));
    num("model.max_len", integer(max_len, "--max-len"));
    // TOML spells the non-finite values nan and inf, as fmt does; validation rejects them.
    if (lr) o.push_back("train.lr=" + fmt::format("{:e}", *lr));
    o.insert(o.end(), set.begin(), set.end());
    return o;
  }
};

int cmd_info() {
  fmt::print("seqmix presets (parameters for a byte-level vocabulary of 256)\n\n");
  fmt::print("{:<12}", "size");
  for (const auto& f : seqmix::models::family_names()) fmt::print(" {:>13}", f);
  fmt::print("  {:>3} {:>5} {:>5} {:>3} {:>5}  source\n", "N", "D", "d_ff", "H", "L");
  for (const auto& s : seqmix::models::size_presets()) {
    fmt::print("{:<12}", s.name);
    for (const auto& f : seqmix::models::family_names()) {
      const auto n = seqmix::models::make_model_config(f, s.name).num_parameters();
      fmt::print(" {:>12.2f}M", static_cast<double>(n) / 1e6);
    }
    fmt::print("  {:>3} {:>5} {:>5} {:>3} {:>5}  {}\n", s.n_layers, s.d_model, s.d_ff, s.n_heads,
               s.max_len, s.source);
  }
  fmt::print(
      "\nweird-net / aib-net: Structure B (AIB attention in odd layers, self-attention in even)\n"
      "weird-net-a: Structure A (AIB attention in every layer)\n"
      "moss: Structure B, Leaky-ReLU FFN, biases on A and V\n"
      "transformer: softmax self-attention in every layer (GPT-2 style)\n"
      "extractor-transformer: the Extractor in every layer; no LayerNorm, no biases, ReLU FFN\n"
      "transformer-plain: the same stack with self-attention (the Extractor paper's baseline)\n"
      "etsmlp / etsmlp-gate: ETSMLP (-Gate), CES inside an MLP of width d_ff, bidirectional\n"
      "  encoders as in the paper (classification); etsmlp-lm / etsmlp-gate-lm: causal, for\n"
      "  language modelling\n"
      "With a SentencePiece tokenizer (--tokenizer) the embedding and head grow to its size.\n");
  fmt::print("\nBLAS: {}\n", seqmix::util::blas_description());
  fmt::print("Large-block pool: {}\n", seqmix::util::large_block_pool_description());
  return 0;
}

// Every option of every command: a value given must not be empty (CLI11 would turn '' into
// the option's default), and an integer must be one that fits in 64 bits (CLI11 would clamp
// 9223372036854775808) -- written plainly or as an exact power-of-ten form such as 1e9.
void harden(CLI::App* app) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("expected a value, got ''") : ""; },
      "", "");
  const CLI::Validator integer(
      [](std::string& v) -> std::string {
        int64_t n = 0;
        std::string why = read_integer(v, n);
        if (why.empty()) v = std::to_string(n);
        return why;
      },
      "", "");
  for (CLI::Option* opt : app->get_options()) {
    const std::string type = opt->get_type_name();
    if (type.empty()) continue;  // a flag
    opt->check(non_empty);
    if (type == "INT" || type == "UINT") opt->transform(integer);
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) harden(sub);
}

// Output files a command writes into a folder that may already hold some: refused unless
// --overwrite says to replace them, and never into a training run's folder.
void check_outputs(const std::string& dir, const std::vector<std::string>& names,
                   bool overwrite) {
  seqmix::util::check_path_text(dir, "--out");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw std::runtime_error("--out: '" + dir + "' exists and is not a folder");
  if (!seqmix::util::run_files_in(dir).empty())
    throw std::runtime_error("--out: '" + dir + "' is a training run's folder; choose another");
  for (const auto& n : names)
    if (!overwrite && fs::exists(fs::path(dir) / n, ec))
      throw std::runtime_error("--out: '" + (fs::path(dir) / n).string() +
                               "' exists; give --overwrite to replace it, or another folder");
}

// The model of a run folder or checkpoint, with its configuration and tokenizer.
seqmix::models::SequenceModel load_model(const std::string& run, RunConfig& config,
                                         seqmix::data::Tokenizer& tokenizer) {
  seqmix::train::CheckpointFile checkpoint(seqmix::train::find_checkpoint(run));
  config = checkpoint.config();
  config.check_resources(false);  // a stored configuration too large to hold is refused here
  tokenizer = checkpoint.tokenizer();
  seqmix::models::SequenceModel model(config.model);
  checkpoint.load(model, nullptr);
  model->eval();
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: this may replace the process with one on faster BLAS kernels.
  seqmix::util::reexec_with_fitting_openblas_core(argv);
  // Shapes vary between training steps (padded batches of varying length): bounded. The
  // benchmarks switch to kRepeating below (their shapes repeat exactly, case by case).
  try {
    seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kBounded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqmix: error: %s\n", e.what());
    return 1;
  }
  // Past a file-size limit (ulimit -f) a write should fail like one on a full disk, with an
  // error the checkpoint code reports, not kill the process mid-file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "seqmix: sub-quadratic sequence models (AIB/Weird attention, the Extractor, Transformer) -- "
      "train, evaluate, compare, generate, benchmark"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "seqmix " SEQMIX_VERSION);
  // --help shows each option's default (options whose default comes from the preset or the
  // config file have none of their own and say so).
  app.option_defaults()->always_capture_default();

  ConfigFlags train_flags;
  std::string out;
  bool resume = false, dump = false;
  auto* train = app.add_subcommand("train", "train a language model (bytes or SentencePiece tokens), or a classifier "
                                   "on a task (--task)");
  train_flags.add_to(train);
  train->add_option("--out", out, "run folder (config.toml, metrics.jsonl, checkpoint.pt)");
  bool overwrite = false;
  train->add_flag("--resume", resume, "continue from <out>/checkpoint.pt");
  train->add_flag("--overwrite", overwrite,
                  "replace the run already in <out> (kept until the new run's first checkpoint)");
  train->add_flag("--dump-config", dump, "print the resolved configuration and exit");

  std::string eval_run, eval_data, eval_data_dir, eval_split;
  int64_t eval_max_tokens = 0, eval_threads = 0, eval_batch = 32;
  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint; prints one JSON line");
  eval->add_option("run", eval_run, "run folder or checkpoint file")->required();
  eval->add_option("--data", eval_data, "corpus (default: the one it was trained on)");
  eval->add_option("--data-dir", eval_data_dir, kDataDirHelp);
  eval->add_option("--split", eval_split,
                   "valid or test (enwik8/text8; tasks: valid, test or train, default test)");
  eval->add_option("--max-tokens,--max-bytes,--max-examples", eval_max_tokens,
                   "score only the first N held-out tokens (bytes for byte-level models; "
                   "examples for a task)");
  eval->add_option("--batch-size", eval_batch, "windows per forward pass");
  eval->add_option("--threads", eval_threads, "intra-op threads (0 = all)");

  std::string gen_run, prompt = "\n";
  int64_t max_new = 256, top_k = 0, gen_seed = 0, gen_threads = 0;
  double temperature = 0.8, top_p = 0.95;
  auto* gen = app.add_subcommand("generate", "generate text from a trained model");
  gen->add_option("run", gen_run, "run folder or checkpoint file")->required();
  gen->add_option("--prompt", prompt, "text to continue");
  gen->add_option("--max-new-tokens", max_new,
                  "tokens to generate (bytes for byte-level models), at most 1e9");
  gen->add_option("--temperature", temperature, "sampling temperature (0 = greedy)");
  gen->add_option("--top-k", top_k, "keep the k most likely tokens (0 = all)");
  gen->add_option("--top-p", top_p, "nucleus sampling threshold in (0, 1]");
  gen->add_option("--seed", gen_seed, "sampling seed");
  gen->add_option("--threads", gen_threads,
                  "intra-op threads (0 = 1: a token's work is too small to share; more than 1 "
                  "run with OMP_WAIT_POLICY=passive unless it is set)");

  auto* info = app.add_subcommand("info", "list model presets with parameter counts");

  auto* tok = app.add_subcommand("tokenizer", "SentencePiece tokenizers");
  tok->require_subcommand(1);
  std::string tok_data = "sotu", tok_data_dir, tok_out;
  seqmix::data::TokenizerOptions tok_opts;
  auto* tok_train = tok->add_subcommand(
      "train", "train a SentencePiece BPE model on a corpus's training split (never on held-out "
               "text); prints one JSON line");
  tok_train->add_option("--data", tok_data, "corpus: sotu, moby-dick, or a text file/folder path");
  tok_train->add_option("--data-dir", tok_data_dir, kDataDirHelp);
  tok_train->add_option("--vocab-size", tok_opts.vocab_size, "pieces, byte pieces included");
  tok_train->add_option("--model-type", tok_opts.model_type, "bpe (default) or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  tok_train->add_option("--max-sentences", tok_opts.max_sentences,
                        "lines sampled for training (0 = all)");
  tok_train->add_option("--seed", tok_opts.seed, "line sampling seed");
  tok_train->add_option("--threads", tok_opts.threads, "trainer threads (0 = all)");
  tok_train->add_option("--out", tok_out, "model file to write, e.g. runs/moby-bpe5000.model")
      ->required();
  bool tok_overwrite = false;
  tok_train->add_flag("--overwrite", tok_overwrite, "replace --out if it exists");

  auto* data_cmd = app.add_subcommand("data", "generate benchmark task data");
  data_cmd->require_subcommand(1);
  seqmix::data::ListOpsOptions listops_opts;
  std::string listops_out;
  auto* listops_cmd = data_cmd->add_subcommand(
      "listops",
      "ListOps as the Long Range Arena generates it (seeded): writes listops_train.tsv, "
      "listops_val.tsv and listops_test.tsv (LRA's Source / Target columns) into --out");
  listops_cmd->add_option("--out", listops_out, "output folder")->required();
  listops_cmd->add_option("--seed", listops_opts.seed, "random seed");
  listops_cmd->add_option("--train", listops_opts.train, "training sequences (LRA: 96000)");
  listops_cmd->add_option("--valid", listops_opts.valid, "validation sequences (LRA: 2000)");
  listops_cmd->add_option("--test", listops_opts.test, "test sequences (LRA: 2000)");
  listops_cmd->add_option("--min-length", listops_opts.min_length,
                          "tokens, exclusive (LRA: 500)");
  listops_cmd->add_option("--max-length", listops_opts.max_length,
                          "tokens, exclusive (LRA: 2000)");
  listops_cmd->add_option("--max-depth", listops_opts.max_depth, "tree depth (LRA: 10)");
  listops_cmd->add_option("--max-args", listops_opts.max_args, "arguments per operator (LRA: 10)");
  bool listops_overwrite = false;
  listops_cmd->add_flag("--overwrite", listops_overwrite, "replace the files already in --out");

  std::string pf_out;
  int32_t pf_resolution = 32;
  int64_t pf_count = 16;
  int64_t pf_seed = 0;
  bool pf_overwrite = false;
  auto* pf_cmd = data_cmd->add_subcommand(
      "pathfinder",
      "example Pathfinder / Path-X images to look at: example_<i>_<label>.pgm (binary PGM) and "
      "labels.tsv (file, label, marker centres) into --out");
  pf_cmd->add_option("--out", pf_out, "output folder")->required();
  pf_cmd->add_option("--resolution", pf_resolution, "image side in [16, 256]: 32 (Pathfinder), 128 (Path-X)");
  pf_cmd->add_option("--count", pf_count, "images (labels alternate 1, 0, 1, ...)");
  pf_cmd->add_flag("--overwrite", pf_overwrite, "replace the files already in --out");
  pf_cmd->add_option("--seed", pf_seed, "random seed");

  ConfigFlags cmp_flags;
  seqmix::train::CompareOptions cmp_opts;
  std::vector<std::string> cmp_models;
  auto* cmp = app.add_subcommand(
      "compare",
      "train several models on exactly the same batches; per-model run folders, summary.jsonl "
      "and compare.png (training cost per batch, median and quartiles per bucket)");
  cmp_flags.add_to(cmp);
  cmp->add_option("--out", cmp_opts.out_dir, "output folder")->required();
  cmp->add_option("--run", cmp_models,
                  "a model: \"NAME=PRESET [section.key=value ...]\" (repeatable; the options "
                  "above apply to every model first)")
      ->required();
  cmp->add_option("--bucket", cmp_opts.bucket,
                  "batches per median/quartile bucket (default: max(1, max_steps / 20))");

  seqmix::train::PlotOptions plot_opts;
  auto* plot = app.add_subcommand(
      "plot", "draw training and held-out curves of runs against the step (gnuplot)");
  plot->add_option("runs", plot_opts.runs, "run folders (each with metrics.jsonl)")->required();
  plot->add_option("--metric", plot_opts.metric,
                   "bpc, loss, accuracy or lr (default: bpc for byte-level language models, "
                   "else loss)");
  plot->add_option("--out", plot_opts.out,
                   "the picture, FILE.png or FILE.svg (default with one run: "
                   "RUN/plot_<metric>.png; required with several runs)");

  seqmix::bench::OpsBenchOptions bench_opts;
  bool bench_json = false;
  int64_t bench_threads = 0, bench_blas_threads = 0;
  std::string bench_mode;
  auto* bench = app.add_subcommand("bench", "benchmark programs (not tests)");
  bench->add_option("mode", bench_mode,
                    "ops: AIB fused vs reference vs softmax attention (B=4, D=512, L=1K..16K); "
                    "extractor: Extractor FFT vs literal per-lag sum vs softmax attention "
                    "(B=64, D=128, L=l=128); ces: CES recurrence kernel vs the FFT reference "
                    "(B=4, D=512, L=1K..16K). Options override the mode's defaults.")
      ->required()
      ->check(CLI::IsMember({"ops", "extractor", "ces"}));
  bench->add_option("--L", bench_opts.lengths, "sequence lengths")->delimiter(',');
  bench->add_option("--B", bench_opts.batch, "batch size");
  bench->add_option("--D", bench_opts.d_model, "channels / d_model");
  bench->add_option("--heads", bench_opts.n_heads, "attention heads");
  bench->add_option("--reps", bench_opts.reps, "timed repetitions (median reported)");
  bench->add_option("--ops", bench_opts.ops,
                    "subset of aib_fused,aib_reference,aib_layer,attention_layer,extractor_fast,"
                    "extractor_reference,ces_kernel,ces_fft_reference")
      ->delimiter(',');
  bench->add_option("--threads", bench_threads, "LibTorch threads (0 = all)");
  bench->add_option("--blas-threads", bench_blas_threads, "OpenBLAS threads (0 = as LibTorch)");
  bench->add_flag("--json", bench_json, "one JSON object per line instead of a table");

  harden(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.get_subcommands().empty()) {  // bare `seqmix`: what it can do
    std::cout << app.help();
    return 0;
  }

  try {
    if (info->parsed()) return cmd_info();

    if (listops_cmd->parsed()) {
      check_outputs(listops_out, {"listops_train.tsv", "listops_val.tsv", "listops_test.tsv"},
                    listops_overwrite);
      const auto d = seqmix::data::generate_listops(listops_opts);  // checks the options first
      std::filesystem::create_directories(listops_out);
      const std::pair<const char*, const std::vector<seqmix::data::LabelledSequence>*> splits[] = {
          {"train", &d.train}, {"val", &d.valid}, {"test", &d.test}};
      for (const auto& [name, rows] : splits) {
        std::string tsv = "Source\tTarget\n";
        for (const auto& r : *rows)
          tsv += seqmix::data::listops_to_string(r.tokens) + "\t" + std::to_string(r.label) + "\n";
        const std::string path = (std::filesystem::path(listops_out) /
                                  (std::string("listops_") + name + ".tsv"))
                                     .string();
        seqmix::util::write_file_atomic(path, tsv);
        fmt::print("{}\n", nlohmann::json{{"split", name}, {"path", path}, {"sequences", rows->size()}}
                               .dump());
      }
      return 0;
    }

    if (pf_cmd->parsed()) {
      seqmix::data::validate_pathfinder_export(pf_resolution, pf_count, pf_seed);
      const auto o = seqmix::data::pathfinder_options(pf_resolution);
      std::vector<std::string> names{"labels.tsv"};
      for (int64_t i = 0; i < pf_count; ++i)
        names.push_back(fmt::format("example_{}_{}.pgm", i, i % 2 == 0 ? 1 : 0));
      check_outputs(pf_out, names, pf_overwrite);
      std::filesystem::create_directories(pf_out);
      std::string tsv = "file\tlabel\tmarker_a_row\tmarker_a_col\tmarker_b_row\tmarker_b_col\n";
      for (int64_t i = 0; i < pf_count; ++i) {
        const int32_t label = i % 2 == 0 ? 1 : 0;
        const auto img = seqmix::data::render_pathfinder_example(
            o, seqmix::data::pathfinder_export_seed(pf_seed, i), label);
        const std::string name = fmt::format("example_{}_{}.pgm", i, label);
        seqmix::util::write_file_atomic((std::filesystem::path(pf_out) / name).string(),
                                        seqmix::data::pathfinder_to_pgm(img));
        tsv += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", name, label, img.marker_a[0],
                           img.marker_a[1], img.marker_b[0], img.marker_b[1]);
      }
      const std::string path = (std::filesystem::path(pf_out) / "labels.tsv").string();
      seqmix::util::write_file_atomic(path, tsv);
      fmt::print("{}\n", nlohmann::json{{"path", path}, {"images", pf_count},
                                        {"resolution", pf_resolution}}
                             .dump());
      return 0;
    }

    if (tok_train->parsed()) {
      seqmix::util::check_path_text(tok_out, "--out");
      {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (fs::is_directory(tok_out, ec))
          throw std::runtime_error("tokenizer train: --out '" + tok_out +
                                   "' is a folder; give the model file's path");
        if (fs::exists(tok_out, ec) && !tok_overwrite)
          throw std::runtime_error("tokenizer train: --out '" + tok_out +
                                   "' exists; give --overwrite to replace it, or another path");
        // Found wrong before the training, not after it.
        for (fs::path up = fs::path(tok_out).parent_path(); !up.empty(); up = up.parent_path()) {
          if (fs::exists(up, ec)) {
            if (!fs::is_directory(up, ec))
              throw std::runtime_error("tokenizer train: --out '" + tok_out + "': '" +
                                       up.string() + "' is not a folder");
            break;
          }
          if (up == up.parent_path()) break;
        }
      }
      const auto corpus = seqmix::data::ByteCorpus::load(tok_data, tok_data_dir);
      tok_opts.source = tok_data;
      const auto t = seqmix::data::Tokenizer::train(corpus.train(), tok_opts);
      const std::filesystem::path dir = std::filesystem::path(tok_out).parent_path();
      if (!dir.empty()) std::filesystem::create_directories(dir);
      t.save(tok_out);
      const auto tokens = seqmix::data::TokenCorpus::build(corpus, t);
      fmt::print("{}\n",
                 nlohmann::json{{"out", tok_out},
                                {"vocab_size", t.vocab_size()},
                                {"data", tok_data},
                                {"train_tokens", tokens.train.size()},
                                {"eval_tokens", tokens.eval.size()},
                                {"bytes_per_token", static_cast<double>(corpus.train().size()) /
                                                        static_cast<double>(tokens.train.size())}}
                     .dump());
      return 0;
    }

    if (cmp->parsed()) {
      seqmix::util::install_stop_signals();
      seqmix::util::check_path_text(cmp_opts.out_dir, "--out");
      cmp_opts.config_path = cmp_flags.config_path;
      cmp_opts.shared_overrides = cmp_flags.overrides();
      for (const auto& spec : cmp_models)
        cmp_opts.models.push_back(seqmix::train::parse_compare_model(spec));
      seqmix::train::resolve_compare(cmp_opts);  // every check, before anything is created
      if (!seqmix::util::run_files_in(cmp_opts.out_dir).empty())
        throw std::runtime_error("--out: '" + cmp_opts.out_dir +
                                 "' is a training run's folder, not a comparison's; choose "
                                 "another");
      // The comparison's folder is locked as a run folder is: a second compare (or a train)
      // into it fails at once instead of tearing its summary and plots.
      const bool cmp_created = !std::filesystem::exists(cmp_opts.out_dir);
      std::filesystem::create_directories(cmp_opts.out_dir);
      std::optional<seqmix::util::FolderLock> cmp_lock;
      try {
        cmp_lock.emplace(cmp_opts.out_dir, "compare folder");
      } catch (...) {
        if (cmp_created) std::filesystem::remove(cmp_opts.out_dir);
        throw;
      }
      const auto r = seqmix::train::compare(cmp_opts);
      for (const auto& row : r.rows)
        fmt::print("{}\n", nlohmann::json{{"name", row.name},
                                          {"preset", row.preset},
                                          {"parameters", row.parameters},
                                          {"steps", row.steps},
                                          {"train_loss", row.train_loss},
                                          {"split", "eval"},
                                          {"loss", row.eval_loss},
                                          {"perplexity", row.eval_perplexity},
                                          {"bpc", row.eval_bpc},
                                          {"seconds", row.seconds}}
                               .dump());
      if (!r.plot.empty()) fmt::print(stderr, "compare: plot written to '{}'\n", r.plot);
      return 0;
    }

    if (plot->parsed()) {
      const auto r = seqmix::train::plot_runs(plot_opts);
      fmt::print("{}\n", nlohmann::json{{"metric", r.metric}, {"out", r.path}}.dump());
      return 0;
    }

    if (bench->parsed()) {
      seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kRepeating);
      if (bench_mode != "ops") {
        // The mode's defaults, then whatever the command line set explicitly.
        auto d = bench_mode == "extractor" ? seqmix::bench::OpsBenchOptions::extractor_defaults()
                                           : seqmix::bench::OpsBenchOptions::ces_defaults();
        if (bench->count("--L") == 0) bench_opts.lengths = d.lengths;
        if (bench->count("--B") == 0) bench_opts.batch = d.batch;
        if (bench->count("--D") == 0) bench_opts.d_model = d.d_model;
        if (bench->count("--ops") == 0) bench_opts.ops = d.ops;
      }
      seqmix::train::check_threads(bench_threads, "--threads");
      seqmix::train::check_threads(bench_blas_threads, "--blas-threads");
      const int64_t n = seqmix::train::configure_threads(bench_threads, bench_blas_threads);
      std::vector<nlohmann::json> rows;
      if (!bench_json)
        fmt::print(stderr, "seqmix bench {}: B={} D={} heads={} reps={} threads={} blas={} (float32)\n",
                   bench_mode, bench_opts.batch, bench_opts.d_model, bench_opts.n_heads,
                   bench_opts.reps, n, seqmix::util::blas_description());
      seqmix::bench::run_ops_bench(bench_opts, [&](nlohmann::json row) {
        if (row.value("op", "") == "stream_triad") row["blas"] = seqmix::util::blas_description();
        rows.push_back(row);
        if (bench_json) {
          fmt::print("{}\n", row.dump());
          std::fflush(stdout);
        } else {
          fmt::print(stderr, "  {}\n", row.dump());
        }
      });
      if (!bench_json) fmt::print("{}", seqmix::bench::format_ops_table(rows));
      return 0;
    }

    if (train->parsed()) {
      const RunConfig* base_ptr = nullptr;
      std::shared_ptr<seqmix::train::CheckpointFile> checkpoint;  // read once, here
      std::shared_ptr<seqmix::util::FolderLock> lock;  // taken before the checkpoint is read
      if (resume) {
        if (out.empty()) throw std::runtime_error("--resume needs --out <run folder>");
        seqmix::util::check_path_text(out, "--out");
        if (std::filesystem::is_directory(out))
          lock = std::make_shared<seqmix::util::FolderLock>(out, "run folder");
        checkpoint = std::make_shared<seqmix::train::CheckpointFile>(
            seqmix::train::find_checkpoint(out));
        base_ptr = &checkpoint->config();
      }
      const RunConfig config =
          seqmix::train::resolve_config(train_flags.config_path, train_flags.overrides(), base_ptr);
      if (dump) {
        std::cout << config.to_toml();
        return 0;
      }
      if (out.empty()) throw std::runtime_error("train: --out <run folder> is required");
      seqmix::util::install_stop_signals();
      seqmix::train::TrainOptions opts;
      opts.out_dir = out;
      opts.resume = resume;
      opts.overwrite = overwrite;
      opts.lock = std::move(lock);
      opts.checkpoint = std::move(checkpoint);
      const auto r = seqmix::train::train(config, opts);
      if (!config.data.task.empty()) {
        fmt::print("{}\n", nlohmann::json{{"steps", r.steps},
                                          {"task", config.data.task},
                                          {"model", config.model.preset},
                                          {"train_loss", r.final_train_loss},
                                          {"valid_accuracy", r.eval_accuracy},
                                          {"test_accuracy", r.test_accuracy},
                                          {"test_loss", r.test_loss},
                                          {"train_accuracy", r.train_accuracy},
                                          {"parameters", config.model.num_parameters()},
                                          {"seconds", r.seconds},
                                          {"out", out}}
                               .dump());
        return 0;
      }
      fmt::print("{}\n", nlohmann::json{{"steps", r.steps},
                                        {"train_loss", r.final_train_loss},
                                        {"split", config.data.eval_split},
                                        {"loss", r.eval_loss},
                                        {"perplexity", r.eval_perplexity},
                                        {"bpc", r.eval_bpc},
                                        {"seconds", r.seconds},
                                        {"out", out}}
                             .dump());
      return 0;
    }

    if (eval->parsed()) {
      if (eval_batch < 1)
        throw std::invalid_argument("--batch-size must be >= 1, got " + std::to_string(eval_batch));
      if (eval_max_tokens < 0)
        throw std::invalid_argument("--max-bytes / --max-tokens / --max-examples must be >= 0 (0 "
                                    "= all), got " + std::to_string(eval_max_tokens));
      seqmix::train::check_threads(eval_threads, "--threads");
      RunConfig config;
      auto tokenizer = seqmix::data::Tokenizer::bytes();
      auto model = load_model(eval_run, config, tokenizer);
      seqmix::train::configure_threads(eval_threads);
      if (!eval_data_dir.empty()) config.data.dir = eval_data_dir;
      if (!config.data.task.empty()) {
        if (!eval_data.empty())
          throw std::invalid_argument("--data: '" + eval_run + "' is a classifier on task '" +
                                      config.data.task +
                                      "', which brings its own data; give --split instead");
        // A classifier: accuracy on one split of the task it was trained on.
        const std::string split = eval_split.empty() ? "test" : eval_split;
        const auto& d = config.data;
        const auto task = seqmix::data::load_task(seqmix::train::task_spec(config));
        const std::vector<seqmix::data::LabelledSequence>* examples =
            split == "test"    ? &task.splits.test
            : split == "valid" ? &task.splits.valid
            : split == "train" ? &task.splits.train
                               : nullptr;
        if (!examples)
          throw std::runtime_error("--split: a task has the splits train, valid and test, got '" +
                                   split + "'");
        const auto r = seqmix::train::evaluate_classifier(model, *examples, eval_batch,
                                                          eval_max_tokens, d.pad_to_multiple);
        if (!std::isfinite(r.loss))
          throw std::runtime_error("eval: the loss of '" + eval_run + "' on the " + split +
                                   " split is not finite: its weights produce NaN or inf");
        fmt::print("{}\n", nlohmann::json{{"split", split},
                                          {"task", d.task},
                                          {"loss", r.loss},
                                          {"accuracy", r.accuracy},
                                          {"examples", r.examples},
                                          {"seconds", r.seconds}}
                               .dump());
        return 0;
      }
      if (!eval_data.empty()) config.data.source = eval_data;
      if (!eval_split.empty()) config.data.eval_split = eval_split;
      const auto corpus = seqmix::data::TokenCorpus::build(
          seqmix::data::ByteCorpus::load(config.data.source, config.data.dir,
                                         config.data.eval_split),
          tokenizer);
      const auto r =
          seqmix::train::evaluate(model, corpus.eval, tokenizer, eval_batch, eval_max_tokens);
      if (!std::isfinite(r.loss))
        throw std::runtime_error("eval: the held-out loss of '" + eval_run +
                                 "' is not finite: its weights produce NaN or inf");
      fmt::print("{}\n", nlohmann::json{{"split", config.data.eval_split},
                                        {"data", config.data.source},
                                        {"eval_split", config.data.eval_split},
                                        {"tokenizer", tokenizer.name()},
                                        {"loss", r.loss},
                                        {"perplexity", r.perplexity},
                                        {"bpc", r.bpc},
                                        {"tokens", r.tokens},
                                        {"bytes", r.bytes},
                                        {"seconds", r.seconds}}
                             .dump());
      return 0;
    }

    if (gen->parsed()) {
      // Every option is checked before anything reaches stdout.
      seqmix::generate::SamplingOptions o;
      o.temperature = temperature;
      o.top_k = top_k;
      o.top_p = top_p;
      seqmix::generate::validate(o);
      if (gen_seed < 0)
        throw std::invalid_argument("--seed must be >= 0, got " + std::to_string(gen_seed));
      if (max_new < 0 || max_new > 1000000000)
        throw std::invalid_argument("--max-new-tokens must be in [0, 1e9], got " +
                                    std::to_string(max_new));
      seqmix::train::check_threads(gen_threads, "--threads");
      const int64_t threads = seqmix::generate::generate_threads(gen_threads);
      // libgomp reads its wait policy only when it is loaded: for more than one thread, run
      // again with OMP_WAIT_POLICY=passive (unless set) before anything is loaded or printed.
      seqmix::util::reexec_with_passive_omp_wait(argv, threads);
      RunConfig config;
      auto tokenizer = seqmix::data::Tokenizer::bytes();
      auto model = load_model(gen_run, config, tokenizer);
      seqmix::train::configure_threads(threads);
      // The prompt goes out with the first new text, so that a model that cannot generate
      // (non-finite outputs) prints nothing on stdout before its error.
      bool started = false;
      auto emit = [&](const std::string& t) {
        if (!started) std::fputs(prompt.c_str(), stdout);
        started = true;
        std::fputs(t.c_str(), stdout);
        std::fflush(stdout);
      };
      seqmix::generate::GenerationStats stats;
      try {
        seqmix::generate::generate_text(model, tokenizer, prompt, max_new, o,
                                        static_cast<uint64_t>(gen_seed), emit, &stats);
      } catch (const std::exception& e) {
        if (started) std::fputc('\n', stdout);
        throw std::runtime_error("generate: '" + gen_run + "': " + e.what());
      }
      if (!started) emit("");
      std::fputc('\n', stdout);
      std::fflush(stdout);
      fmt::print(stderr, "seqmix generate: {}\n", seqmix::generate::describe(stats));
      return 0;
    }
  } catch (const seqmix::train::Interrupted& e) {
    std::fprintf(stderr, "seqmix: %s\n", e.what());
    return 128 + e.signal;  // the shell's convention for "ended by signal N"
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "seqmix: error: out of memory; lower --batch-size or --max-len, or the "
                         "model size\n");
    return 1;
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // LibTorch's allocator reports an allocation it could not make as a failed enforce.
    if (what.find("alloc_cpu") != std::string::npos ||
        what.find("DefaultCPUAllocator") != std::string::npos) {
      std::fprintf(stderr, "seqmix: error: out of memory (%s); lower --batch-size or --max-len, "
                           "or the model size\n", what.substr(0, what.find('\n')).c_str());
      return 1;
    }
    std::fprintf(stderr, "seqmix: error: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqmix: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
