// seqmix tokenizer train: a SentencePiece model trained on a corpus's training split.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/util/files.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::cli {

namespace {

struct TokenizerFlags {
  std::string data = "sotu", data_dir, out;
  data::TokenizerOptions options;
  bool overwrite = false;
};

// Found wrong before the training, not after it.
void check_out(const TokenizerFlags& f) {
  util::check_path_text(f.out, "--out");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(f.out, ec))
    throw std::runtime_error("tokenizer train: --out '" + f.out +
                             "' is a folder; give the model file's path");
  util::check_replaceable(f.out);
  // A run's tokenizer.model is what its checkpoint was trained with: replacing it would make
  // the run decode with another vocabulary.
  const std::string parent = fs::path(f.out).has_parent_path()
                                 ? fs::path(f.out).parent_path().string()
                                 : std::string(".");
  if (!util::run_files_in(parent).empty())
    throw std::runtime_error("tokenizer train: --out '" + f.out +
                             "' is in a training run's folder; give a path outside it");
  if (fs::exists(fs::symlink_status(f.out, ec)) && !f.overwrite)
    throw std::runtime_error("tokenizer train: --out '" + f.out +
                             "' exists; give --overwrite to replace it, or another path");
  for (fs::path up = fs::path(f.out).parent_path(); !up.empty(); up = up.parent_path()) {
    if (fs::exists(up, ec)) {
      if (!fs::is_directory(up, ec))
        throw std::runtime_error("tokenizer train: --out '" + f.out + "': '" + up.string() +
                                 "' is not a folder");
      break;
    }
    if (up == up.parent_path()) break;
  }
}

int run_tokenizer_train(TokenizerFlags& f) {
  check_out(f);
  const auto corpus = data::ByteCorpus::load(f.data, f.data_dir);
  f.options.source = f.data;
  const auto t = data::Tokenizer::train(corpus.train(), f.options);
  const std::filesystem::path dir = std::filesystem::path(f.out).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  t.save(f.out);
  const auto tokens = data::TokenCorpus::build(corpus, t);
  fmt::print("{}\n",
             nlohmann::json{{"out", f.out},
                            {"vocab_size", t.vocab_size()},
                            {"data", f.data},
                            {"train_tokens", tokens.train.size()},
                            {"eval_tokens", tokens.eval.size()},
                            {"bytes_per_token", static_cast<double>(corpus.train().size()) /
                                                    static_cast<double>(tokens.train.size())}}
                 .dump());
  return 0;
}

}  // namespace

Command add_tokenizer(CLI::App& app) {
  auto f = std::make_shared<TokenizerFlags>();
  auto* cmd = app.add_subcommand("tokenizer", "SentencePiece tokenizers");
  cmd->require_subcommand(1);
  auto* train = cmd->add_subcommand(
      "train", "train a SentencePiece BPE model on a corpus's training split (never on held-out "
               "text); prints one JSON line");
  train->add_option("--data", f->data, "corpus: sotu, moby-dick, or a text file/folder path");
  train->add_option("--data-dir", f->data_dir, kDataDirHelp);
  train->add_option("--vocab-size", f->options.vocab_size, "pieces, byte pieces included");
  train->add_option("--model-type", f->options.model_type, "bpe (default) or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  train->add_option("--max-sentences", f->options.max_sentences,
                    "lines sampled for training (0 = all, else more than 100)");
  train->add_option("--seed", f->options.seed, "line sampling seed");
  train->add_option("--threads", f->options.threads, "trainer threads (0 = all)");
  train->add_option("--out", f->out, "model file to write, e.g. runs/moby-bpe5000.model")
      ->required();
  train->add_flag("--overwrite", f->overwrite, "replace --out if it exists");
  // `tokenizer` alone is refused by require_subcommand, so its only work is `train`.
  return {cmd, [f](char**) { return run_tokenizer_train(*f); }};
}

}  // namespace seqmix::cli
