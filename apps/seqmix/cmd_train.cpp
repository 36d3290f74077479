// seqmix train: resolve a configuration from flags, train into a run folder, print one JSON
// line with the final figures.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/train/checkpoint.h"
#include "seqmix/train/resolve.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/signals.h"

namespace seqmix::cli {

namespace {

struct TrainFlags {
  ConfigFlags config;
  std::string out;
  bool resume = false, overwrite = false, dump = false;
};

int run_train(const TrainFlags& f) {
  train::TrainOptions options = train::open_training_folder(f.out, f.resume);
  const train::RunConfig config = train::resolve_run(
      {f.config.config_path, "", f.config.overrides()},
      options.checkpoint ? &options.checkpoint->config() : nullptr);
  if (f.dump) {
    std::cout << config.to_toml();
    return 0;
  }
  if (f.out.empty()) throw std::runtime_error("train: --out <run folder> is required");
  util::install_stop_signals();
  options.overwrite = f.overwrite;
  const auto r = train::train(config, options);
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
                                      {"out", f.out}}
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
                                    {"out", f.out}}
                         .dump());
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  auto* cmd = app.add_subcommand("train",
                                 "train a language model (bytes or SentencePiece tokens), or a "
                                 "classifier on a task (--task)");
  f->config.add_to(cmd);
  cmd->add_option("--out", f->out, "run folder (config.toml, metrics.jsonl, checkpoint.pt)");
  cmd->add_flag("--resume", f->resume, "continue from <out>/checkpoint.pt");
  cmd->add_flag("--overwrite", f->overwrite,
                "replace the run already in <out> (kept until the new run's first checkpoint)");
  cmd->add_flag("--dump-config", f->dump, "print the resolved configuration and exit");
  return {cmd, [f](char**) { return run_train(*f); }};
}

}  // namespace seqmix::cli
