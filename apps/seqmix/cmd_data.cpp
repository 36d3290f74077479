// seqmix data: benchmark task data written to files (ListOps as LRA's TSVs, example
// Pathfinder images).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/data/listops.h"
#include "seqmix/data/pathfinder.h"
#include "seqmix/data/tasks.h"
#include "seqmix/train/classify.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/util/files.h"

namespace seqmix::cli {

namespace {

struct ListOpsFlags {
  data::ListOpsOptions options;
  std::string out;
  bool overwrite = false;
};

struct PathfinderFlags {
  std::string out;
  int32_t resolution = 32;
  int64_t count = 16, seed = 0;
  bool overwrite = false;
};

int run_listops(const ListOpsFlags& f) {
  check_outputs(f.out, {"listops_train.tsv", "listops_val.tsv", "listops_test.tsv"},
                f.overwrite);
  const auto d = data::generate_listops(f.options);  // checks the options first
  std::filesystem::create_directories(f.out);
  const std::pair<const char*, const std::vector<data::LabelledSequence>*> splits[] = {
      {"train", &d.train}, {"val", &d.valid}, {"test", &d.test}};
  for (const auto& [name, rows] : splits) {
    std::string tsv = "Source\tTarget\n";
    for (const auto& r : *rows)
      tsv += data::listops_to_string(r.tokens) + "\t" + std::to_string(r.label) + "\n";
    const std::string path =
        (std::filesystem::path(f.out) / (std::string("listops_") + name + ".tsv")).string();
    util::write_file_atomic(path, tsv);
    fmt::print("{}\n",
               nlohmann::json{{"split", name}, {"path", path}, {"sequences", rows->size()}}.dump());
  }
  return 0;
}

int run_pathfinder(const PathfinderFlags& f) {
  data::validate_pathfinder_export(f.resolution, f.count, f.seed);
  const auto o = data::pathfinder_options(f.resolution);
  auto label_of = [](int64_t i) { return i % 2 == 0 ? 1 : 0; };
  std::vector<std::string> names{"labels.tsv"};
  for (int64_t i = 0; i < f.count; ++i)
    names.push_back(fmt::format("example_{}_{}.pgm", i, label_of(i)));
  check_outputs(f.out, names, f.overwrite);
  std::filesystem::create_directories(f.out);
  std::string tsv = "file\tlabel\tmarker_a_row\tmarker_a_col\tmarker_b_row\tmarker_b_col\n";
  for (int64_t i = 0; i < f.count; ++i) {
    const int32_t label = label_of(i);
    const auto img =
        data::render_pathfinder_example(o, data::pathfinder_export_seed(f.seed, i), label);
    const std::string name = fmt::format("example_{}_{}.pgm", i, label);
    util::write_file_atomic((std::filesystem::path(f.out) / name).string(),
                            data::pathfinder_to_pgm(img));
    tsv += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", name, label, img.marker_a[0], img.marker_a[1],
                       img.marker_b[0], img.marker_b[1]);
  }
  const std::string path = (std::filesystem::path(f.out) / "labels.tsv").string();
  util::write_file_atomic(path, tsv);
  fmt::print("{}\n",
             nlohmann::json{{"path", path}, {"images", f.count}, {"resolution", f.resolution}}
                 .dump());
  return 0;
}

// A task's three splits as the trainer sees them (the configuration resolved as for `seqmix
// train`: --task, --size, --max-len, --set data.*), one JSON object per example, for
// baselines outside seqmix (scripts/lra-baselines.py). Byte-level tasks (text, retrieval)
// give the bytes as "text" (and "text_b": a retrieval pair's second passage); bytes that are
// not UTF-8 become U+FFFD. Token tasks give "tokens".
struct TaskExportFlags {
  ConfigFlags config;
  std::string out;
  bool overwrite = false;
};

int run_task_export(const TaskExportFlags& f) {
  if (f.config.task.empty())
    throw std::invalid_argument("--task: `seqmix data task` needs a task (listops, text, ...)");
  const auto config = train::resolve_config(f.config.config_path, f.config.overrides());
  const std::vector<std::string> names = {"train.jsonl", "valid.jsonl", "test.jsonl"};
  check_outputs(f.out, names, f.overwrite);
  const auto d = data::load_task(train::task_spec(config));
  const bool bytes = config.data.task == "text" || config.data.task == "retrieval";
  auto text = [](const std::vector<int32_t>& tokens) {
    std::string s;
    s.reserve(tokens.size());
    for (const int32_t t : tokens) s += static_cast<char>(t);
    return s;
  };
  std::filesystem::create_directories(f.out);
  const std::vector<data::LabelledSequence>* splits[] = {&d.splits.train, &d.splits.valid,
                                                         &d.splits.test};
  for (size_t i = 0; i < names.size(); ++i) {
    std::string lines;
    for (const auto& e : *splits[i]) {
      nlohmann::json j = {{"label", e.label}};
      if (bytes) {
        j["text"] = text(e.tokens);
        if (!e.tokens_b.empty()) j["text_b"] = text(e.tokens_b);
      } else {
        j["tokens"] = e.tokens;
      }
      lines += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    const std::string path = (std::filesystem::path(f.out) / names[i]).string();
    util::write_file_atomic(path, lines);
    fmt::print("{}\n", nlohmann::json{{"split", names[i].substr(0, names[i].find('.'))},
                                      {"path", path},
                                      {"examples", splits[i]->size()}}
                           .dump());
  }
  fmt::print(stderr, "data task: {}\n", d.description);
  return 0;
}

}  // namespace

Command add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "generate benchmark task data");
  cmd->require_subcommand(1);

  auto lo = std::make_shared<ListOpsFlags>();
  auto* listops = cmd->add_subcommand(
      "listops",
      "ListOps as the Long Range Arena generates it (seeded): writes listops_train.tsv, "
      "listops_val.tsv and listops_test.tsv (LRA's Source / Target columns) into --out");
  listops->add_option("--out", lo->out, "output folder")->required();
  listops->add_option("--seed", lo->options.seed, "random seed");
  listops->add_option("--train", lo->options.train, "training sequences (LRA: 96000)");
  listops->add_option("--valid", lo->options.valid, "validation sequences (LRA: 2000)");
  listops->add_option("--test", lo->options.test, "test sequences (LRA: 2000)");
  listops->add_option("--min-length", lo->options.min_length, "tokens, exclusive (LRA: 500)");
  listops->add_option("--max-length", lo->options.max_length, "tokens, exclusive (LRA: 2000)");
  listops->add_option("--max-depth", lo->options.max_depth, "tree depth (LRA: 10)");
  listops->add_option("--max-args", lo->options.max_args, "arguments per operator (LRA: 10)");
  listops->add_flag("--overwrite", lo->overwrite, "replace the files already in --out");

  auto pf = std::make_shared<PathfinderFlags>();
  auto* pathfinder = cmd->add_subcommand(
      "pathfinder",
      "example Pathfinder / Path-X images to look at: example_<i>_<label>.pgm (binary PGM) and "
      "labels.tsv (file, label, marker centres) into --out");
  pathfinder->add_option("--out", pf->out, "output folder")->required();
  pathfinder->add_option("--resolution", pf->resolution,
                         "image side in [16, 256]: 32 (Pathfinder), 128 (Path-X)");
  pathfinder->add_option("--count", pf->count, "images (labels alternate 1, 0, 1, ...)");
  pathfinder->add_flag("--overwrite", pf->overwrite, "replace the files already in --out");
  pathfinder->add_option("--seed", pf->seed, "random seed");

  auto te = std::make_shared<TaskExportFlags>();
  auto* task = cmd->add_subcommand(
      "task",
      "a task's splits as `seqmix train --task` builds them (same flags and --set data.*): "
      "train.jsonl, valid.jsonl, test.jsonl into --out, one example per line ({\"label\", "
      "\"text\"[, \"text_b\"]} for text and retrieval, {\"label\", \"tokens\"} otherwise)");
  te->config.add_to(task);
  task->add_option("--out", te->out, "output folder")->required();
  task->add_flag("--overwrite", te->overwrite, "replace the files already in --out");

  return {cmd, [lo, pf, te, listops, pathfinder](char**) {
            if (listops->parsed()) return run_listops(*lo);
            if (pathfinder->parsed()) return run_pathfinder(*pf);
            return run_task_export(*te);
          }};
}

}  // namespace seqmix::cli
