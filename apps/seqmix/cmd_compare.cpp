// seqmix compare: several models trained on exactly the same batches, one summary line per
// model and one picture.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/train/reporting/compare.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"

namespace seqmix::cli {

namespace {

struct CompareFlags {
  ConfigFlags config;
  train::CompareOptions options;
  std::vector<std::string> models;
  DistFlags dist;
};

int run_compare(CompareFlags& f) {
  auto& o = f.options;
  o.group = f.dist.join();
  const bool writer = !o.group || o.group->rank() == 0;
  util::install_stop_signals(o.group ? 1.0 : 0.0);
  util::check_path_text(o.out_dir, "--out");
  o.config_path = f.config.config_path;
  o.shared_overrides = f.config.overrides();
  for (const auto& spec : f.models) o.models.push_back(train::parse_compare_model(spec));
  std::optional<util::FolderLock> lock;
  auto open_folder = [&] {
    train::resolve_compare(o);  // every check, before anything is created
    if (!writer) return;  // rank 0's folder
    if (!util::run_files_in(o.out_dir).empty())
      throw std::runtime_error("--out: '" + o.out_dir +
                               "' is a training run's folder, not a comparison's; choose another");
    // The comparison's folder is locked as a run folder is: a second compare (or a train)
    // into it fails at once instead of tearing its summary and plots.
    const bool created = !std::filesystem::exists(o.out_dir);
    std::filesystem::create_directories(o.out_dir);
    try {
      lock.emplace(o.out_dir, "compare folder");
    } catch (...) {
      if (created) std::filesystem::remove(o.out_dir);
      throw;
    }
  };
  if (o.group)
    o.group->all_or_none("compare: opening the folder", open_folder);
  else
    open_folder();
  const auto r = train::compare(o);
  if (!writer) return 0;
  if (r.summaries.empty()) {
    for (const auto& row : r.rows) {
      nlohmann::json line = row;
      line["split"] = "eval";
      fmt::print("{}\n", line.dump());
    }
  } else {
    // One line per model (its figure over the seeds), then one per pair with the verdict;
    // a readable table of the same on stderr.
    for (const auto& s : r.summaries) fmt::print("{}\n", nlohmann::json(s).dump());
    for (const auto& p : r.pairs) fmt::print("{}\n", nlohmann::json(p).dump());
    const bool pct = r.summaries.front().metric == "test_accuracy";
    const double k = pct ? 100 : 1;
    fmt::print(stderr, "compare: {} over {} seeds (mean +- sample sd{}):\n",
               r.summaries.front().metric, r.summaries.front().values.size(),
               pct ? ", percent" : "");
    for (const auto& s : r.summaries)
      fmt::print(stderr, "  {:<24} {:9.4f} +- {:.4f}{}\n", s.name, s.mean * k, s.sd * k,
                 s.at_chance ? fmt::format("  at chance (<= {:.2f})", s.chance_bound * k)
                 : s.seeds_at_chance > 0
                     ? fmt::format("  {} of {} seeds at chance (<= {:.2f})", s.seeds_at_chance,
                                   s.values.size(), s.chance_bound * k)
                     : "");
    for (const auto& p : r.pairs)
      fmt::print(stderr, "  {} vs {}: gap {:+.4f}, se {:.4f}: {}\n", p.a, p.b, p.gap * k,
                 p.se * k,
                 p.verdict == "tie"         ? std::string("tie (gap under 3 standard errors)")
                 : p.verdict == "undecided" ? std::string("undecided (one seed)")
                 : p.verdict == "not comparable"
                     ? std::string("not comparable (a model at chance)")
                     : (p.verdict == "a" ? p.a : p.b) + " is better");
  }
  if (!r.plot.empty()) fmt::print(stderr, "compare: plot written to '{}'\n", r.plot);
  return 0;
}

}  // namespace

Command add_compare(CLI::App& app) {
  auto f = std::make_shared<CompareFlags>();
  auto* cmd = app.add_subcommand(
      "compare",
      "train several models on exactly the same batches; per-model run folders, summary.jsonl "
      "and compare.png (training cost per batch, median and quartiles per bucket)");
  f->config.add_to(cmd);
  cmd->add_option("--out", f->options.out_dir, "output folder")->required();
  cmd->add_option("--run", f->models,
                  "a model: \"NAME=PRESET [section.key=value ...]\" (repeatable; the options "
                  "above apply to every model first)")
      ->required();
  cmd->add_option("--seeds", f->options.seeds,
                  "training seeds per model: train.seed, train.seed + 1, ... (1 to 100); "
                  "with more than one, mean +- sd per model and a verdict per pair, where a "
                  "gap under 3 standard errors is a tie and a classifier at chance (test "
                  "accuracy <= majority class + 5 binomial SE) is not comparable")
      ->capture_default_str();
  cmd->add_option("--bucket", f->options.bucket,
                  "batches per median/quartile bucket (default: max(1, max_steps / 20))");
  f->dist.add_to(cmd);
  return {cmd, [f](char** argv) {
    if (f->dist.launcher()) return f->dist.launch(argv);
    return DistFlags::run_worker([&] { return run_compare(*f); });
  }};
}

}  // namespace seqmix::cli
