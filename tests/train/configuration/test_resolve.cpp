// The run layer: a tokenizer sets model.vocab_size and a mismatching one is refused with a
// message that says what to do; a resumed run needs its folder; a stored run loads with its
// configuration, tokenizer and weights; an evaluation's data follows the stored
// configuration and the request; the configuration summary has one line per section.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/models/mixer_registry.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/configuration/resolve.h"
#include "support/gradcheck.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using namespace seqmix;

namespace {

std::string corpus_file(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "the whale and the ship sailed on a great white sea " + std::to_string(i % 7) + "\n";
  std::ofstream(dir + "/c.txt") << text;
  return dir + "/c.txt";
}

// A 300-piece BPE model trained on corpus_file's text, saved in `dir`.
std::string bpe_model(const std::string& dir) {
  const auto corpus = data::ByteCorpus::load(corpus_file(dir), "");
  data::TokenizerOptions o;
  o.vocab_size = 300;
  o.threads = 1;
  o.announce = false;
  data::Tokenizer::train(corpus.train(), o).save(dir + "/bpe.model");
  return dir + "/bpe.model";
}

}  // namespace

TEST(Resolve, BytesTokenizerOverrides) {
  EXPECT_EQ(train::tokenizer_overrides("bytes"),
            (std::vector<train::Override>{{"data.tokenizer", "bytes"},
                                          {"model.vocab_size", int64_t{256}}}));
  train::RunRequest r;
  r.tokenizer = "bytes";
  r.overrides = {"model.size=tiny"};
  const auto c = train::resolve_run(r);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.size, "tiny");
  EXPECT_EQ(c.data.tokenizer, "bytes");
  EXPECT_EQ(train::resolve_tokenizer(c).vocab_size(), 256);
}

TEST(Resolve, TokenizerSetsVocabSizeAndAMismatchIsRefused) {
  const std::string dir = seqmix::testing::temp_dir("resolve-tok");
  const std::string model = bpe_model(dir);
  train::RunRequest r;
  r.tokenizer = model;
  r.overrides = {"model.size=tiny"};
  const auto c = train::resolve_run(r);
  EXPECT_EQ(c.model.vocab_size, 300);
  EXPECT_EQ(c.data.tokenizer, model);
  EXPECT_EQ(train::resolve_tokenizer(c).vocab_size(), 300);

  // Naming the file without --tokenizer leaves the byte vocabulary: refused, saying how to
  // fix it.
  train::RunRequest by_key;
  by_key.overrides = {"model.size=tiny", "data.tokenizer=\"" + model + "\""};
  const auto bad = train::resolve_run(by_key);
  EXPECT_EQ(bad.model.vocab_size, 256);
  const std::string why = error_of([&] { train::resolve_tokenizer(bad); });
  EXPECT_NE(why.find("model.vocab_size is 256 but tokenizer '" + model + "' has 300 pieces; "
                     "set model.vocab_size=300"),
            std::string::npos)
      << why;

  // Overrides after the tokenizer have the last word, and are checked the same way.
  r.overrides.push_back("model.vocab_size=512");
  const auto later = train::resolve_run(r);
  EXPECT_EQ(later.model.vocab_size, 512);
  EXPECT_THROW(train::resolve_tokenizer(later), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST(Resolve, ClassifierVocabularyIsItsTasks) {
  train::RunConfig c;
  c.data.task = "listops";
  c.model.vocab_size = 16;
  EXPECT_NO_THROW(train::check_tokenizer(c, data::Tokenizer::bytes()));
  c.data.task.clear();
  EXPECT_THROW(train::check_tokenizer(c, data::Tokenizer::bytes()), std::runtime_error);
}

TEST(Resolve, TokenizerThatIsNotAModel) {
  const std::string dir = seqmix::testing::temp_dir("resolve-badtok");
  std::ofstream(dir + "/x.model") << "not a model";
  const std::string why = error_of([&] { train::tokenizer_overrides(dir + "/x.model"); });
  EXPECT_NE(why.find("is not a SentencePiece model"), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

TEST(Resolve, TrainingRunAndResume) {
  const std::string dir = seqmix::testing::temp_dir("resolve-train");
  train::TrainingRequest r;
  r.config.overrides = {"model.size=tiny", {"train.max_steps", int64_t{7}}};
  r.out_dir = dir + "/run";
  r.overwrite = true;
  const auto fresh = train::prepare_training(r);
  EXPECT_EQ(fresh.config.train.max_steps, 7);
  EXPECT_EQ(fresh.options.out_dir, dir + "/run");
  EXPECT_FALSE(fresh.options.resume);
  EXPECT_TRUE(fresh.options.overwrite);
  EXPECT_FALSE(fresh.options.lock);
  EXPECT_FALSE(fresh.options.checkpoint);
  EXPECT_FALSE(std::filesystem::exists(dir + "/run"));  // preparing creates nothing

  // The request's own mistakes, named by its fields (the command line names its flags).
  auto bad = r;
  bad.allow_data_change = true;
  EXPECT_EQ(error_of([&] { train::prepare_training(bad); }),
            "`allow_data_change` applies to `resume` only");
  bad = r;
  bad.out_dir.clear();
  EXPECT_EQ(error_of([&] { train::run_training(bad); }),
            "`out_dir`: a training run needs its run folder");
  bad.resume = true;
  EXPECT_EQ(error_of([&] { train::prepare_training(bad); }),
            "`resume` needs `out_dir`, the run folder to resume");
  bad.out_dir = dir + "/none";
  EXPECT_THROW(train::prepare_training(bad), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir + "/none"));

  // A stored run is the base: its keys stay, the request's overrides apply on top.
  auto stored = fresh.config;
  stored.model.d_model = 32;
  stored.model.n_heads = 2;
  std::filesystem::create_directories(dir + "/run");
  models::SequenceModel model(stored.model);
  train::save_checkpoint(dir + "/run/checkpoint.pt", model, nullptr, stored, 3);
  train::TrainingRequest more;
  more.config.overrides = {"train.max_steps=9"};
  more.out_dir = dir + "/run";
  more.resume = true;
  const auto resumed = train::prepare_training(more);
  EXPECT_EQ(resumed.config.model.d_model, 32);
  EXPECT_EQ(resumed.config.train.max_steps, 9);
  EXPECT_TRUE(resumed.options.resume);
  ASSERT_TRUE(resumed.options.checkpoint);
  EXPECT_EQ(resumed.options.checkpoint->config().train.max_steps, 7);
  EXPECT_TRUE(resumed.options.lock);  // the folder stays locked until train() is done
  // A configuration resolved already is used as it is; the request's own is not read.
  more.resume = false;
  more.resolved = stored;
  more.config.overrides = {"train.max_steps=11"};
  EXPECT_EQ(train::prepare_training(more).config.train.max_steps, 7);
  std::filesystem::remove_all(dir);
}

TEST(Resolve, LoadRunAndItsEvaluationData) {
  const std::string dir = seqmix::testing::temp_dir("resolve-eval");
  const std::string text = corpus_file(dir);
  train::RunRequest r;
  r.overrides = {"model.size=tiny", "model.max_len=16", "data.source=\"" + text + "\""};
  const auto config = train::resolve_run(r);
  torch::manual_seed(2);
  models::SequenceModel model(config.model);
  std::filesystem::create_directories(dir + "/run");
  train::save_checkpoint(dir + "/run/checkpoint.pt", model, nullptr, config, 1);

  auto run = train::load_run(dir + "/run");
  EXPECT_TRUE(run.config.diff(config).empty());
  EXPECT_TRUE(run.tokenizer.is_bytes());
  EXPECT_FALSE(run.model->is_training());
  const auto a = model->named_parameters(), b = run.model->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) EXPECT_TRUE(at::equal(p.value(), b[p.key()])) << p.key();

  // The run's own held-out split, as training scored it.
  train::EvalRequest request;
  request.run = dir + "/run";
  const auto set = train::load_eval_set(run.config, run.tokenizer, request);
  EXPECT_FALSE(set.classification);
  EXPECT_EQ(set.split, "valid");
  const auto expected =
      data::TokenCorpus::build(data::ByteCorpus::load(text, "", "valid"), run.tokenizer).eval;
  EXPECT_EQ(set.tokens, expected);

  // Another corpus: the configuration says which one was scored.
  std::ofstream(dir + "/other.txt") << std::string(3000, 'z');
  request.data = dir + "/other.txt";
  const auto other = train::load_eval_set(run.config, run.tokenizer, request);
  EXPECT_EQ(run.config.data.source, dir + "/other.txt");
  ASSERT_FALSE(other.tokens.empty());
  EXPECT_EQ(other.tokens.front(), 'z');

  EXPECT_THROW(train::load_run(dir + "/missing"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST(Resolve, ClassifierEvaluationRequests) {
  train::RunConfig c;
  c.data.task = "listops";
  train::EvalRequest request;
  request.run = "runs/lo";
  request.data = "sotu";
  EXPECT_EQ(error_of([&] { train::load_eval_set(c, data::Tokenizer::bytes(), request); }),
            "`data`: 'runs/lo' is a classifier on task 'listops', which brings its own data; "
            "give `split` instead");
  request.data.clear();
  request.split = "dev";
  EXPECT_EQ(error_of([&] { train::load_eval_set(c, data::Tokenizer::bytes(), request); }),
            "`split`: a task has the splits train, valid and test, got 'dev'");
}

TEST(Resolve, ConfigSummaryHasOneLinePerSection) {
  train::RunRequest r;
  r.overrides = {"model.size=tiny", "train.lr=1e-3"};
  const auto c = train::resolve_run(r);
  const std::string summary = train::config_summary(c);
  ASSERT_FALSE(summary.empty());
  EXPECT_EQ(summary.back(), '\n');
  // As many lines as to_toml has tables ([data], [model], [model.aib], ...).
  std::istringstream toml(c.to_toml());
  int tables = 0;
  for (std::string line; std::getline(toml, line);) {
    const size_t first = line.find_first_not_of(' ');  // nested tables may be indented
    tables += first != std::string::npos && line[first] == '[';
  }
  std::istringstream lines(summary);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  // Mixer sections appear for the mixers the model uses only (weird-net: aib, attention).
  int unused = 0;
  for (const auto& row : models::mixer_registry())
    unused += !row.section.empty() && row.name != "aib" && row.name != "attention";
  EXPECT_EQ(static_cast<int>(got.size()), tables - unused) << summary;
  EXPECT_NE(summary.find("\nmodel.aib: "), std::string::npos) << summary;
  EXPECT_NE(summary.find("\nmodel.attention: "), std::string::npos) << summary;
  EXPECT_EQ(summary.find("model.ces:"), std::string::npos) << summary;
  bool model = false, train = false, data = false;
  for (const auto& l : got) {
    EXPECT_EQ(l.find('\n'), std::string::npos);
    if (l.rfind("model: ", 0) == 0) {
      model = true;
      EXPECT_EQ(l.rfind("model: preset=weird-net size=tiny ", 0), 0u) << l;
      EXPECT_NE(l.find(" vocab_size=256"), std::string::npos) << l;
      EXPECT_NE(l.find(" mixers=[aib,attention]"), std::string::npos) << l;
    }
    if (l.rfind("train: ", 0) == 0) {
      train = true;
      EXPECT_NE(l.find(" lr=0.001"), std::string::npos) << l;
      EXPECT_NE(l.find(" min_lr_ratio=0.1 "), std::string::npos) << l;  // shortest form
    }
    if (l.rfind("data: ", 0) == 0) {
      data = true;
      EXPECT_NE(l.find(" source=sotu"), std::string::npos) << l;
      EXPECT_NE(l.find("dir=\"\""), std::string::npos) << l;  // an empty string is visible
    }
  }
  EXPECT_TRUE(model && train && data) << summary;
}
