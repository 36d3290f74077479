#include "seqmix/train/configuration/resolve.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <toml++/toml.h>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tasks.h"
#include "seqmix/models/mixer_registry.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/classify.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/util/files.h"
#include "seqmix/util/memory.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::train {

std::vector<Override> tokenizer_overrides(const std::string& tokenizer) {
  const auto tok =
      tokenizer == "bytes" ? data::Tokenizer::bytes() : data::Tokenizer::load(tokenizer);
  return {{"data.tokenizer", tokenizer}, {"model.vocab_size", int64_t{tok.vocab_size()}}};
}

RunConfig resolve_run(const RunRequest& request, const RunConfig* base) {
  std::vector<Override> overrides;
  if (!request.tokenizer.empty()) overrides = tokenizer_overrides(request.tokenizer);
  overrides.insert(overrides.end(), request.overrides.begin(), request.overrides.end());
  return resolve_config(request.config_path, overrides, base);
}

void check_tokenizer(const RunConfig& config, const data::Tokenizer& tokenizer) {
  if (!config.data.task.empty() || tokenizer.vocab_size() == config.model.vocab_size) return;
  throw std::runtime_error(
      "model.vocab_size is " + std::to_string(config.model.vocab_size) + " but tokenizer '" +
      config.data.tokenizer + "' has " + std::to_string(tokenizer.vocab_size()) +
      " pieces; set model.vocab_size=" + std::to_string(tokenizer.vocab_size()) +
      " (giving the tokenizer by itself does so)");
}

data::Tokenizer resolve_tokenizer(const RunConfig& config) {
  data::Tokenizer tokenizer = config.data.tokenizer == "bytes"
                                  ? data::Tokenizer::bytes()
                                  : data::Tokenizer::load(config.data.tokenizer);
  check_tokenizer(config, tokenizer);
  return tokenizer;
}

TrainOptions open_training_folder(const std::string& out_dir, bool resume,
                                  std::shared_ptr<dist::ProcessGroup> group) {
  if (group) {
    TrainOptions options;
    std::string bytes;
    group->all_or_none("opening the run folder", [&] {
      if (group->rank() != 0) return;
      options = open_training_folder(out_dir, resume);
      if (resume) bytes = util::read_file(find_checkpoint(out_dir));
    });
    options.out_dir = out_dir;
    options.resume = resume;
    options.group = group;
    if (!resume) return options;
    group->broadcast_bytes(bytes, 0, "sending the checkpoint to every rank");
    if (group->rank() != 0) {
      // A private copy, parsed whole by CheckpointFile and removed at once.
      group->all_or_none("reading the checkpoint", [&] {
        const std::string tmp = util::write_temp_file(bytes, "seqmix-rank-checkpoint");
        try {
          options.checkpoint = std::make_shared<CheckpointFile>(tmp);
        } catch (...) {
          std::filesystem::remove(tmp);
          throw;
        }
        std::filesystem::remove(tmp);
      });
    } else {
      group->all_or_none("reading the checkpoint", [] {});
    }
    return options;
  }
  TrainOptions options;
  options.out_dir = out_dir;
  options.resume = resume;
  if (!resume) return options;
  if (out_dir.empty())
    throw std::invalid_argument("`resume` needs `out_dir`, the run folder to resume");
  util::check_path_text(out_dir, "`out_dir`");
  // Locked before the checkpoint is read, so a run training in the folder cannot replace it
  // between this read and train()'s.
  if (std::filesystem::is_directory(out_dir))
    options.lock = std::make_shared<util::FolderLock>(out_dir, "run folder");
  options.checkpoint = std::make_shared<CheckpointFile>(find_checkpoint(out_dir));
  return options;
}

TrainingRun prepare_training(const TrainingRequest& request) {
  if (request.allow_data_change && !request.resume)
    throw std::invalid_argument("`allow_data_change` applies to `resume` only");
  TrainingRun run;
  run.options = open_training_folder(request.out_dir, request.resume, request.group);
  run.options.overwrite = request.overwrite;
  run.options.allow_data_change = request.allow_data_change;
  run.options.report_interval = request.report_interval;
  auto resolve = [&] {
    if (request.resolved) {
      run.config = *request.resolved;
      return;
    }
    const CheckpointFile* stored = run.options.checkpoint.get();
    if (stored) check_config_copy(stored->path(), stored->config());
    run.config = resolve_run(request.config, stored ? &stored->config() : nullptr);
  };
  if (request.group)
    request.group->all_or_none("resolving the configuration", resolve);
  else
    resolve();
  return run;
}

FinishedRun run_training(const TrainingRequest& request) {
  if (request.out_dir.empty())
    throw std::invalid_argument("`out_dir`: a training run needs its run folder");
  TrainingRun run = prepare_training(request);
  FinishedRun done;
  done.result = train(run.config, run.options);
  done.config = std::move(run.config);
  return done;
}

namespace {

// "section.key" -> the value as RunConfig::to_toml writes it (one "key = value" per line
// under "[section]" headers), for naming the keys where two configurations differ.
std::map<std::string, std::string> flat_keys(const std::string& toml_text) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml_text);
  std::string section, line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') {
      section = line.substr(1, line.find(']') - 1) + ".";
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos || line.front() == '#') continue;
    out[section + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

}  // namespace

void check_config_copy(const std::string& checkpoint_path, const RunConfig& stored) {
  namespace fs = std::filesystem;
  const fs::path ckpt(checkpoint_path);
  if (ckpt.filename() != "checkpoint.pt") return;  // a checkpoint file outside a run folder
  const fs::path file = ckpt.parent_path() / "config.toml";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return;  // removed: the next checkpoint writes it
  const std::string where = "'" + file.string() + "'";
  const std::string why =
      "; a run's configuration is the one in its checkpoint.pt, and config.toml is only its "
      "copy, which seqmix never reads back (eval would ignore an edit, --resume overwrite "
      "it). Put the file back as it was, or remove it (the next checkpoint writes it again); "
      "change a key on resume with --set (train.max_steps, the intervals, threads, device), "
      "or start a new run from the edited file with --config";
  RunConfig copy;
  try {
    copy = RunConfig::from_toml(data::read_regular_file(file.string(), "config.toml"),
                                file.string());
  } catch (const std::exception& e) {  // not TOML, an unknown key, a wrong type
    throw std::runtime_error(where + " does not read as a configuration: " + e.what() + why);
  }
  const std::string want = stored.to_toml(), have = copy.to_toml();
  if (want == have) return;
  const auto a = flat_keys(have), b = flat_keys(want);
  std::vector<std::string> diffs;
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    const std::string mine = it == a.end() ? "(absent)" : it->second;
    if (mine != value)
      diffs.push_back(key + " = " + mine + " there, " + value + " in the checkpoint");
  }
  for (const auto& [key, value] : a)
    if (!b.count(key)) diffs.push_back(key + " = " + value + " there, absent in the checkpoint");
  std::string list;
  for (size_t i = 0; i < diffs.size() && i < 4; ++i) list += (i ? "; " : "") + diffs[i];
  if (diffs.size() > 4) list += fmt::format("; and {} more", diffs.size() - 4);
  throw std::runtime_error(where + " differs from the run's checkpoint: " + list + why);
}

LoadedRun load_run(const std::string& run) {
  const std::string path = find_checkpoint(run);
  CheckpointFile checkpoint(path);
  LoadedRun loaded;
  loaded.config = checkpoint.config();
  loaded.config.check_resources(false);  // a stored configuration too large to hold
  loaded.tokenizer = checkpoint.tokenizer();
  loaded.model = models::SequenceModel(loaded.config.model);
  checkpoint.load(loaded.model, nullptr);
  // After the checkpoint itself is verified: a damaged checkpoint is the first thing to say.
  check_config_copy(path, checkpoint.config());
  loaded.model->eval();
  return loaded;
}

EvalSet load_eval_set(RunConfig& config, const data::Tokenizer& tokenizer,
                      const EvalRequest& request) {
  auto& d = config.data;
  if (!request.data_dir.empty()) d.dir = request.data_dir;
  EvalSet set;
  if (!d.task.empty()) {
    if (!request.data.empty())
      throw std::invalid_argument("`data`: '" + request.run + "' is a classifier on task '" +
                                  d.task + "', which brings its own data; give `split` instead");
    set.classification = true;
    set.split = request.split.empty() ? "test" : request.split;
    // Checked before the task is loaded: generating a task's data can take minutes.
    if (set.split != "test" && set.split != "valid" && set.split != "train")
      throw std::runtime_error("`split`: a task has the splits train, valid and test, got '" +
                               set.split + "'");
    data::TaskData task = data::load_task(task_spec(config));
    auto& splits = task.splits;
    set.examples = std::move(set.split == "test"    ? splits.test
                             : set.split == "valid" ? splits.valid
                                                    : splits.train);
    return set;
  }
  if (!request.data.empty()) d.source = request.data;
  if (!request.split.empty()) d.eval_split = request.split;
  set.split = d.eval_split;
  const data::ByteCorpus corpus = data::ByteCorpus::load(d.source, d.dir, d.eval_split);
  // Only the held-out split is scored: its tokens alone (the training split's are 9x more).
  util::check_available_memory(
      4.0 * static_cast<double>(corpus.eval().size()),
      "`data`: the held-out tokens of '" + d.source + "' (up to one per byte, 4 bytes each)",
      "");
  set.tokens = tokenizer.encode(corpus.eval());
  if (set.tokens.size() < 2)
    throw std::runtime_error("data: the held-out split of '" + d.source + "' encodes to " +
                             std::to_string(set.tokens.size()) +
                             " tokens; at least 2 are needed");
  return set;
}

namespace {

// One value as the summary shows it: short, and unambiguous where it matters (an empty
// string, one with spaces).
std::string brief(const toml::node& node) {
  if (const auto* s = node.as_string()) {
    const std::string& v = s->get();
    if (v.empty() || v.find_first_of(" \t\"'=") != std::string::npos)
      return nlohmann::json(v).dump();
    return v;
  }
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  if (const auto* a = node.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); ++i) out += (i ? "," : "") + brief(*a->get(i));
    return out + "]";
  }
  std::ostringstream ss;
  node.visit([&](auto&& n) { ss << n; });
  return ss.str();
}

void summarise(const toml::table& table, const std::string& name, std::string& out) {
  // Keys in the order the TOML text has them, a section's identity first.
  std::vector<std::pair<std::string, const toml::node*>> keys;
  for (const auto& [k, v] : table) keys.emplace_back(std::string(k.str()), &v);
  auto rank = [](const std::string& k) { return k == "preset" ? 0 : k == "size" ? 1 : 2; };
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    if (rank(a.first) != rank(b.first)) return rank(a.first) < rank(b.first);
    const auto &pa = a.second->source().begin, &pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  std::string line = name + ":";
  std::vector<std::pair<std::string, const toml::table*>> nested;
  for (const auto& [k, v] : keys) {
    if (const auto* t = v->as_table())
      nested.emplace_back(name + "." + k, t);
    else
      line += " " + k + "=" + brief(*v);
  }
  if (line.size() > name.size() + 1 || nested.empty()) out += line + "\n";
  for (const auto& [n, t] : nested) summarise(*t, n, out);
}

}  // namespace

std::string config_summary(const RunConfig& config) {
  const std::string text = config.to_toml();
  const toml::table root =
      toml::parse(std::string_view(text), std::string_view("resolved configuration"));
  std::vector<std::pair<std::string, const toml::table*>> sections;
  for (const auto& [k, v] : root)
    if (const auto* t = v.as_table()) sections.emplace_back(std::string(k.str()), t);
  std::stable_sort(sections.begin(), sections.end(), [](const auto& a, const auto& b) {
    return a.second->source().begin.line < b.second->source().begin.line;
  });
  std::string all;
  for (const auto& [name, table] : sections) summarise(*table, name, all);
  // Of the mixer sections, those of the mixers this model uses (config.toml has them all).
  std::set<std::string> used;
  for (const auto& row : models::mixer_registry())
    if (std::find(config.model.mixers.begin(), config.model.mixers.end(), row.name) !=
        config.model.mixers.end())
      used.insert("model." + row.section);
  std::set<std::string> mixer_sections;
  for (const auto& row : models::mixer_registry())
    if (!row.section.empty()) mixer_sections.insert("model." + row.section);
  std::string out;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(':'));
    if (!mixer_sections.count(name) || used.count(name)) out += line + "\n";
  }
  return out;
}

}  // namespace seqmix::train
