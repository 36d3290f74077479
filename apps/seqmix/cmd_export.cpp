// seqmix export / import: a run as a file plain PyTorch reads (torch.load) or as a Hugging
// Face folder (model.safetensors, config.json), and a run folder from either or from a bare
// state dict written by Python (train/serialization/export.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "common.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::cli {

namespace {

struct ExportFlags {
  std::string run, out, format = "pt";
  bool overwrite = false;
};

struct ImportFlags {
  std::string file, out;
  bool overwrite = false;
  ConfigFlags config;
};

std::string megabytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? "?" : fmt::format("{:.2f} MB", static_cast<double>(n) / 1e6);
}

int run_export(const ExportFlags& f) {
  if (f.format == "hf") {
    train::export_run_hf(f.run, f.out, f.overwrite);
    const auto config = train::read_checkpoint_config(train::find_checkpoint(f.run));
    const std::string weights = (std::filesystem::path(f.out) / "model.safetensors").string();
    fmt::print("seqmix export: wrote folder '{}' (model.safetensors {}, config.json{}; {} "
               "parameters, {} / {}): Python reads it with "
               "safetensors.torch.load_file('{}'); seqmix import reads it back\n",
               f.out, megabytes(weights),
               config.data.tokenizer == "bytes" ? "" : ", tokenizer.model",
               config.model.num_parameters(), config.model.preset, config.model.size, weights);
    return 0;
  }
  train::export_run(f.run, f.out, f.overwrite);
  const auto config = train::read_checkpoint_config(train::find_checkpoint(f.run));
  fmt::print("seqmix export: wrote '{}' ({} parameters, {}; {} / {}): Python reads it with "
             "torch.load('{}')\n",
             f.out, config.model.num_parameters(), megabytes(f.out), config.model.preset,
             config.model.size, f.out);
  return 0;
}

int run_import(const ImportFlags& f) {
  util::check_path_text(f.out, "--out");
  const auto& c = f.config;
  // Only a configuration that was asked for: flags given and --set.
  const std::vector<train::Override> overrides = c.overrides();
  const bool configured = !c.config_path.empty() || !overrides.empty();
  train::RunRequest request{c.config_path, "", overrides};
  train::LoadedRun run = train::load_export(f.file, configured ? &request : nullptr);
  train::save_run(f.out, run.model, run.config, run.tokenizer, 0, f.overwrite);
  fmt::print("seqmix import: wrote run folder '{}' ({} / {}, {} parameters, step 0) from '{}'; "
             "seqmix eval, generate and train --resume read it\n",
             f.out, run.config.model.preset, run.config.model.size,
             run.config.model.num_parameters(), f.file);
  return 0;
}

}  // namespace

Command add_export(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  auto* cmd = app.add_subcommand(
      "export", "write a run as a file plain PyTorch opens (torch.load(FILE) gives a dict with "
                "state_dict, config, tokenizer) or as a Hugging Face folder (--format hf)");
  cmd->add_option("run", f->run, "run folder or checkpoint file")->required();
  cmd->add_option("--out", f->out,
                  "the file to write (e.g. model.pt), or the folder with --format hf")
      ->required();
  cmd->add_option("--format", f->format,
                  "pt (default): one torch.load file; hf: a folder of model.safetensors, "
                  "config.json and, for a SentencePiece run, tokenizer.model")
      ->check(CLI::IsMember({"pt", "hf"}));
  cmd->add_flag("--overwrite", f->overwrite,
                "replace --out if it exists (with --format hf: a folder holding an export)");
  return {cmd, [f](char**) { return run_export(*f); }};
}

Command add_import(CLI::App& app) {
  auto f = std::make_shared<ImportFlags>();
  auto* cmd = app.add_subcommand(
      "import", "make a run folder from a seqmix export, a Hugging Face folder "
                "(config.json, model.safetensors) or a bare state dict written by "
                "torch.save(dict(model.state_dict()), FILE); eval, generate and train --resume "
                "then read it");
  cmd->add_option("file", f->file,
                  "seqmix export or bare state dict (.pt), or a folder written by "
                  "`seqmix export --format hf`")
      ->required();
  cmd->add_option("--out", f->out, "run folder to write")->required();
  cmd->add_flag("--overwrite", f->overwrite, "replace the run already in --out");
  // The configuration of a bare state dict, as train takes it; an export brings its own.
  f->config.add_to(cmd);
  return {cmd, [f](char**) { return run_import(*f); }};
}

}  // namespace seqmix::cli
