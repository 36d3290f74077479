// seqmix train: resolve a configuration from flags, train into a run folder, print one JSON
// line with the final figures.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "common.h"
#include "seqmix/dist/launcher.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/signals.h"

namespace seqmix::cli {

namespace {

struct TrainFlags {
  ConfigFlags config;
  std::string out;
  bool resume = false, overwrite = false, dump = false, allow_data_change = false;
  DistFlags dist;
};

int train_here(const TrainFlags& f) {
  const dist::LaunchEnv env = dist::LaunchEnv::from_environment();
  train::TrainingRequest request;
  request.config = {f.config.config_path, "", f.config.overrides()};
  request.out_dir = f.out;
  request.resume = f.resume;
  request.overwrite = f.overwrite;
  request.allow_data_change = f.allow_data_change;
  request.group = f.dump ? nullptr : f.dist.join();
  if (f.dump) {
    const train::RunConfig config = train::prepare_training(request).config;
    if (env.rank == 0) std::cout << config.to_toml();
    return 0;
  }
  if (f.out.empty()) throw std::runtime_error("train: --out <run folder> is required");
  // A worker may get one Ctrl-C twice (the terminal's, its launcher's): the second within a
  // second does not end it mid-step.
  util::install_stop_signals(request.group ? 1.0 : 0.0);
  const auto [config, r] = train::run_training(request);
  const auto& group = request.group;
  if (group && group->rank() != 0) return 0;  // rank 0 reports for the job
  if (!config.data.task.empty()) {
    fmt::print("{}\n", nlohmann::json{{"steps", r.steps},
                                      {"task", config.data.task},
                                      {"model", config.model.preset},
                                      {"train_loss", r.final_train_loss},
                                      {"valid_accuracy", r.eval_accuracy},
                                      {"test_accuracy", r.test_accuracy},
                                      {"test_majority", r.test_majority},
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

// What the workers would refuse, found before the launcher starts any: the configuration
// (resolved as they resolve it) and a batch that does not split into equal shards.
void check_launch(const TrainFlags& f, int world_size) {
  if (f.dump) throw std::invalid_argument("--dump-config prints the configuration: give it "
                                          "without --nproc-per-node");
  if (f.out.empty()) throw std::runtime_error("train: --out <run folder> is required");
  std::optional<train::RunConfig> stored;
  if (f.resume) stored = train::read_checkpoint_config(train::find_checkpoint(f.out));
  const train::RunConfig config = train::resolve_run(
      {f.config.config_path, "", f.config.overrides()}, stored ? &*stored : nullptr);
  // train.device = 'cuda' gives each worker of a machine its own GPU.
  if (config.train.device == "cuda" && f.dist.nproc_per_node &&
      *f.dist.nproc_per_node > static_cast<int>(torch::cuda::device_count()))
    throw std::invalid_argument(fmt::format(
        "train.device = 'cuda' gives each worker its own GPU (cuda:LOCAL_RANK), but "
        "--nproc-per-node is {} and this machine has {} CUDA device(s); start at most that "
        "many workers, or name one GPU (train.device = 'cuda:0') for the workers to share",
        *f.dist.nproc_per_node, torch::cuda::device_count()));
  if (config.train.batch_size % world_size != 0)
    throw std::invalid_argument(fmt::format(
        "train.batch_size (--batch-size) {} is not a multiple of the {} workers: every worker "
        "takes an equal share of the global batch",
        config.train.batch_size, world_size));
}

int run_train(const TrainFlags& f, char** argv) {
  if (f.dist.launcher())
    return f.dist.launch(argv, [&](int world_size) { check_launch(f, world_size); });
  return DistFlags::run_worker([&] { return train_here(f); });
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
  cmd->add_flag("--allow-data-change", f->allow_data_change,
                "with --resume: go on although the data differ from those the checkpoint "
                "was trained on (refused otherwise)");
  cmd->add_flag("--dump-config", f->dump, "print the resolved configuration and exit");
  f->dist.add_to(cmd);
  return {cmd, [f](char** argv) { return run_train(*f, argv); }};
}

}  // namespace seqmix::cli
