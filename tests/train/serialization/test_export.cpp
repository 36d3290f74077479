// Plain PyTorch export and import (train/serialization/export.h): an export and a run folder
// written by save_run give the model's logits exactly; a bare state dict loads with a configuration given
// beside it; every mismatch (shape, missing or extra name, dtype, non-finite value) and every
// file that is neither kind (garbage, truncated, another format or version) is an error naming
// the file and the tensor; the CLI evaluates, generates from and resumes an imported run.
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/train/configuration/resolve.h"
#include "support/cli.h"
#include "support/temp_dir.h"
#include "support/tiny_run.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using namespace seqmix;
namespace fs = std::filesystem;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;

using seqmix::testing::logits;
using seqmix::testing::state_of;
using seqmix::testing::Tiny;
using seqmix::testing::write_pickle;

TEST(Export, SaveRunAndExportGiveIdenticalLogits) {
  Tiny t("export-roundtrip");
  const at::Tensor want = logits(t.model);
  const std::string run = t.dir + "/run";
  train::save_run(run, t.model, t.config, data::Tokenizer::bytes(), 3, false);
  for (const char* f : {"checkpoint.pt", "config.toml"}) EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(run + "/metrics.jsonl"));
  for (const auto& e : fs::directory_iterator(run))  // no temporary left
    EXPECT_EQ(e.path().filename().string()[0] == '.', false) << e.path();
  EXPECT_EQ(read_text(run + "/config.toml"), t.config.to_toml());
  train::LoadedRun stored = train::load_run(run);
  EXPECT_TRUE(at::equal(logits(stored.model), want));

  const std::string file = t.dir + "/wn.pt";
  train::export_run(run, file, false);
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  train::LoadedRun back = train::load_export(file, nullptr);
  EXPECT_TRUE(at::equal(logits(back.model), want));
  EXPECT_EQ(back.config.to_toml(), t.config.to_toml());
  EXPECT_TRUE(back.tokenizer.is_bytes());

  // Nothing is replaced without overwrite; a run's own checkpoint is never written.
  EXPECT_NE(error_of([&] { train::export_run(run, file, false); }).find("exists; give `overwrite`"),
            std::string::npos);
  EXPECT_NO_THROW(train::export_run(run, file, true));
  EXPECT_NE(error_of([&] { train::export_run(run, run + "/checkpoint.pt", true); })
                .find("the checkpoint being exported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train::export_run(file, t.dir + "/x.pt", false); })
                .find("'" + file + "' is a seqmix export, not a checkpoint"),
            std::string::npos);  // an export is not a checkpoint, and the message says so
  EXPECT_NE(error_of([&] { train::save_run(run, t.model, t.config, data::Tokenizer::bytes(), 0, false); })
                .find("already holds a run (checkpoint.pt, config.toml)"),
            std::string::npos);
  EXPECT_EQ(train::CheckpointFile(run + "/checkpoint.pt").load(stored.model, nullptr), 3);

  // An export's configuration is its own.
  EXPECT_NE(error_of([&] { train::load_export(file, &t.request); })
                .find("applies only to a bare state dict"),
            std::string::npos);
}

TEST(Export, SaveRunReplacesARunOnlyWithOverwriteAndChecksTheModel) {
  Tiny t("export-overwrite");
  const std::string run = t.dir + "/run";
  train::save_run(run, t.model, t.config, data::Tokenizer::bytes(), 0, false);
  std::ofstream(run + "/metrics.jsonl") << "{\"step\": 5}\n";
  train::save_run(run, t.model, t.config, data::Tokenizer::bytes(), 1, true);
  EXPECT_FALSE(fs::exists(run + "/metrics.jsonl"));  // the old run's metrics went with it

  // A folder of the user's own is not written into.
  fs::create_directories(t.dir + "/mine");
  std::ofstream(t.dir + "/mine/notes.txt") << "x";
  EXPECT_NE(error_of([&] {
              train::save_run(t.dir + "/mine", t.model, t.config, data::Tokenizer::bytes(), 0, true);
            }).find("holds no seqmix run"),
            std::string::npos);

  // A model that is not the configuration's: refused, and no folder is made.
  train::RunConfig other = t.config;
  other.model.d_model = 32;
  const std::string msg = error_of(
      [&] { train::save_run(t.dir + "/bad", t.model, other, data::Tokenizer::bytes(), 0, false); });
  EXPECT_NE(msg.find("save_run: the model given: parameter 'pos_emb' has shape [32, 64], a model "
                     "of this configuration has [32, 32]"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(t.dir + "/bad"));
}

TEST(Export, BareStateDictNeedsAConfigurationAndLoadsStrictly) {
  Tiny t("export-bare");
  const at::Tensor want = logits(t.model);
  const std::string sd = t.dir + "/sd.pt";
  write_pickle(sd, state_of(t.model));

  EXPECT_NE(error_of([&] { train::load_export(sd, nullptr); })
                .find("export '" + sd + "' holds no configuration (a bare state dict): give it "
                      "with model.preset / model.size, a config file or overrides"),
            std::string::npos);
  train::LoadedRun run = train::load_export(sd, &t.request);
  EXPECT_TRUE(at::equal(logits(run.model), want));

  // float64 is converted to the model's float32.
  auto doubles = state_of(t.model);
  for (auto it = doubles.begin(); it != doubles.end(); ++it)
    if (it->value().is_floating_point()) doubles.insert_or_assign(it->key(), it->value().to(at::kDouble));
  write_pickle(sd, doubles);
  EXPECT_TRUE(at::allclose(logits(train::load_export(sd, &t.request).model), want, 1e-5, 1e-6));

  const std::string name = "blocks.0.mixer.w";
  ASSERT_TRUE(state_of(t.model).contains(name)) << "the AIB distance parameter moved";
  auto expect_error = [&](c10::Dict<std::string, at::Tensor> d, const std::string& want_msg) {
    write_pickle(sd, d);
    const std::string msg = error_of([&] { train::load_export(sd, &t.request); });
    EXPECT_NE(msg.find(want_msg), std::string::npos) << msg;
  };
  auto d = state_of(t.model);
  const at::Tensor w = d.at(name);
  std::vector<int64_t> bigger = w.sizes().vec();
  bigger[0] += 1;
  d.insert_or_assign(name, at::zeros(bigger));
  expect_error(d, "export '" + sd + "': parameter '" + name + "' has shape " +
                      c10::str(at::IntArrayRef(bigger)) + ", the model's is " + c10::str(w.sizes()));
  d = state_of(t.model);
  EXPECT_EQ(d.erase("tok_emb.weight"), 1u);
  expect_error(d, "export '" + sd + "' lacks parameter 'tok_emb.weight' that a model with this "
                  "configuration has");
  d = state_of(t.model);
  d.insert("foo", at::zeros({2}));
  expect_error(d, "export '" + sd + "' holds tensor 'foo' that a model with this configuration "
                  "does not have");
  d = state_of(t.model);
  at::Tensor nan = w.clone();
  nan.view(-1)[0] = std::nan("");
  d.insert_or_assign(name, nan);
  expect_error(d, "export '" + sd + "' holds non-finite values in parameter '" + name + "'");
  d = state_of(t.model);
  d.insert_or_assign(name, w.to(at::kHalf));
  expect_error(d, "parameter '" + name + "' holds Half values; seqmix reads float32 or float64");
  d = state_of(t.model);
  d.insert_or_assign(name, w.to(at::kLong));
  expect_error(d, "parameter '" + name + "' holds Long values");
}

TEST(Export, FilesThatAreNeitherKindAreErrorsNamingTheFile) {
  Tiny t("export-garbage");
  const std::string f = t.dir + "/bad.pt";
  auto load_error = [&](const train::RunRequest* cfg = nullptr) {
    return error_of([&] { train::load_export(f, cfg); });
  };
  EXPECT_NE(load_error().find("export '" + f + "' does not exist"), std::string::npos);
  std::ofstream(f) << "not a zip file at all, just some text\n";
  EXPECT_NE(load_error().find("export '" + f + "' is corrupt or not a seqmix export or state dict"),
            std::string::npos)
      << load_error();

  // Truncated: every prefix of a good file is refused, none crashes.
  write_pickle(f, state_of(t.model));
  const std::string whole = read_text(f);
  for (size_t n : {size_t{0}, size_t{10}, whole.size() / 3, whole.size() / 2, whole.size() - 30,
                   whole.size() - 1}) {
    std::ofstream(f, std::ios::binary | std::ios::trunc) << whole.substr(0, n);
    const std::string msg = load_error(&t.request);
    EXPECT_NE(msg.find("export '" + f + "'"), std::string::npos) << n << ": " << msg;
    EXPECT_NE(msg.find("corrupt"), std::string::npos) << n << ": " << msg;
  }
  // Flipped bytes inside the pickle: a CRC error, not a crash.
  std::string flipped = whole;
  flipped[whole.size() / 4] ^= 0x5a;
  std::ofstream(f, std::ios::binary | std::ios::trunc) << flipped;
  EXPECT_NE(load_error(&t.request).find("export '" + f + "'"), std::string::npos);

  // A pickle that is not a dict.
  write_pickle(f, c10::IValue(at::zeros({3})));
  EXPECT_NE(load_error().find("does not hold a dict"), std::string::npos) << load_error();

  auto generic = [] {
    return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
  };
  auto d = generic();
  d.insert("format", std::string("other.format"));
  write_pickle(f, d);
  EXPECT_NE(load_error().find("has format 'other.format'; seqmix reads 'seqmix.export' files"),
            std::string::npos)
      << load_error();
  d = generic();
  d.insert("format", std::string(train::kExportFormat));
  d.insert("version", int64_t{2});
  write_pickle(f, d);
  EXPECT_NE(load_error().find("has version 2 (written by a newer seqmix); this seqmix reads version 1"),
            std::string::npos)
      << load_error();
  d = generic();
  d.insert("weight", at::zeros({2}));
  d.insert("note", std::string("hello"));
  write_pickle(f, d);
  EXPECT_NE(load_error(&t.request).find("nor a bare state dict: the dict entry 'note' is a str"),
            std::string::npos)
      << load_error(&t.request);
}

TEST(BpeRun, ExportKeepsItsTokenizer) {
  Tiny t("export-bpe");
  const auto corpus = data::ByteCorpus::load(t.corpus, "");
  data::TokenizerOptions o;
  o.vocab_size = 300;
  o.threads = 1;
  o.announce = false;
  data::Tokenizer::train(corpus.train(), o).save(t.dir + "/bpe.model");
  train::RunRequest req = t.request;
  req.tokenizer = t.dir + "/bpe.model";
  const train::RunConfig config = train::resolve_run(req);
  const data::Tokenizer tok = train::resolve_tokenizer(config);
  models::SequenceModel model(config.model);
  const std::string run = t.dir + "/run";
  train::save_run(run, model, config, tok, 0, false);
  EXPECT_TRUE(data::Tokenizer::load(run + "/tokenizer.model").same_as(tok));
  train::export_run(run, t.dir + "/bpe.pt", false);
  fs::remove(t.dir + "/bpe.model");  // the export carries it
  const train::LoadedRun back = train::load_export(t.dir + "/bpe.pt", nullptr);
  EXPECT_TRUE(back.tokenizer.same_as(tok));
  EXPECT_EQ(back.config.model.vocab_size, 300);
  EXPECT_NE(error_of([&] {
              train::save_run(t.dir + "/bytes", model, config, data::Tokenizer::bytes(), 0, false);
            }).find("model.vocab_size is 300"),
            std::string::npos);
}
