// seqmix eval: score a stored run on held-out data (its own, or another corpus or split) and
// print one JSON line.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/nn/precision.h"
#include "seqmix/train/classify.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/util/threads.h"

namespace seqmix::cli {

namespace {

struct EvalFlags {
  train::EvalRequest request;
  int64_t max_tokens = 0, threads = 0, batch = 32;
  std::string precision;  // empty: the run's train.precision
  std::string device;     // empty: the run's train.device
};


int run_eval(const EvalFlags& f) {
  if (f.batch < 1)
    throw std::invalid_argument("--batch-size must be >= 1, got " + std::to_string(f.batch));
  if (f.max_tokens < 0)
    throw std::invalid_argument("--max-bytes / --max-tokens / --max-examples must be >= 0 (0 "
                                "= all), got " + std::to_string(f.max_tokens));
  util::check_threads(f.threads, "--threads");
  run_precision(f.precision, "fp32");  // the flags are checked before anything is loaded
  if (!f.device.empty()) run_device(f.device, "cpu");
  train::LoadedRun run = train::load_run(f.request.run);
  const nn::Precision precision = run_precision(f.precision, run.config.train.precision);
  run.model->to(run_device(f.device, run.config.train.device));
  util::configure_threads(f.threads);
  const nn::AutocastGuard autocast(precision);
  const train::EvalSet set = train::load_eval_set(run.config, run.tokenizer, f.request);
  const auto& d = run.config.data;
  if (set.classification) {
    const auto r = train::evaluate_classifier(run.model, set.examples, f.batch, f.max_tokens,
                                              d.pad_to_multiple);
    if (!std::isfinite(r.loss))
      throw std::runtime_error("eval: the loss of '" + f.request.run + "' on the " + set.split +
                               " split is not finite: its weights produce NaN or inf");
    fmt::print("{}\n", nlohmann::json{{"split", set.split},
                                      {"task", d.task},
                                      {"precision", nn::to_string(precision)},
                                      {"loss", r.loss},
                                      {"accuracy", r.accuracy},
                                      {"majority", r.majority},
                                      {"examples", r.examples},
                                      {"seconds", r.seconds}}
                           .dump());
    return 0;
  }
  const auto r = train::evaluate(run.model, set.tokens, run.tokenizer, f.batch, f.max_tokens);
  if (!std::isfinite(r.loss))
    throw std::runtime_error("eval: the held-out loss of '" + f.request.run +
                             "' is not finite: its weights produce NaN or inf");
  fmt::print("{}\n", nlohmann::json{{"split", d.eval_split},
                                    {"data", d.source},
                                    {"eval_split", d.eval_split},
                                    {"tokenizer", run.tokenizer.name()},
                                    {"precision", nn::to_string(precision)},
                                    {"loss", r.loss},
                                    {"perplexity", r.perplexity},
                                    {"bpc", r.bpc},
                                    {"tokens", r.tokens},
                                    {"bytes", r.bytes},
                                    {"seconds", r.seconds}}
                         .dump());
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app) {
  auto f = std::make_shared<EvalFlags>();
  auto* cmd = app.add_subcommand("eval", "evaluate a checkpoint; prints one JSON line");
  cmd->add_option("run", f->request.run, "run folder or checkpoint file")->required();
  cmd->add_option("--data", f->request.data, "corpus (default: the one it was trained on)");
  cmd->add_option("--data-dir", f->request.data_dir, kDataDirHelp);
  cmd->add_option("--split", f->request.split,
                  "valid or test (enwik8/text8; tasks: valid, test or train, default test)");
  cmd->add_option("--max-tokens,--max-bytes,--max-examples", f->max_tokens,
                  "score only the first N held-out tokens (bytes for byte-level models; "
                  "examples for a task)");
  cmd->add_option("--batch-size", f->batch, "windows per forward pass");
  cmd->add_option("--threads", f->threads, "intra-op threads (0 = all)");
  cmd->add_option("--precision", f->precision,
                  "fp32 or bf16 (default: the run's train.precision)");
  cmd->add_option("--device", f->device,
                  "cpu, cuda or cuda:N (default: the run's train.device)");
  return {cmd, [f](char**) { return run_eval(*f); }};
}

}  // namespace seqmix::cli
