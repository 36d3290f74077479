// End-to-end training tests on a small generated corpus: the held-out loss falls, and a run
// stopped after a checkpoint and resumed reproduces the uninterrupted run exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/trainer.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

// A small, learnable corpus: short sentences from a tiny grammar.
std::string make_corpus(const std::string& dir) {
  const char* subjects[] = {"the cat", "a dog", "my friend", "the old man", "our teacher"};
  const char* verbs[] = {"sees", "likes", "finds", "keeps", "wants"};
  const char* objects[] = {"the ball.", "a red apple.", "his hat.", "the small box.", "a book."};
  std::string text;
  uint32_t s = 1;
  for (int i = 0; i < 3000; ++i) {
    s = s * 1664525u + 1013904223u;
    text += std::string(subjects[(s >> 8) % 5]) + " " + verbs[(s >> 12) % 5] + " " +
            objects[(s >> 16) % 5] + "\n";
  }
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

train::RunConfig tiny_config(const std::string& family, const std::string& corpus) {
  train::RunConfig c;
  c.model = models::make_model_config(family, "tiny");
  c.model.max_len = 32;
  c.model.n_layers = 2;
  c.data.source = corpus;
  c.train.batch_size = 8;
  c.train.max_steps = 60;
  c.train.lr = 3e-3;
  c.train.warmup_steps = 5;
  c.train.eval_interval = 0;
  c.train.checkpoint_interval = 0;
  c.train.log_interval = 1;
  c.train.threads = 1;
  c.train.seed = 5;
  return c;
}

TEST(Train, HeldOutLossFallsForWeirdNetAndTransformer) {
  const std::string dir = seqmix::testing::temp_dir("train-falls");
  const std::string corpus = make_corpus(dir);
  for (const char* family : {"weird-net", "transformer"}) {
    auto c = tiny_config(family, corpus);
    torch::manual_seed(static_cast<uint64_t>(c.train.seed));
    models::SequenceModel fresh(c.model);
    const auto data = data::ByteCorpus::load(corpus, "unused");
    const double before = train::evaluate(fresh, data::Tokenizer::bytes().encode(data.eval()),
                                         data::Tokenizer::bytes(), 16)
                              .bpc;
    train::TrainOptions o;
    o.out_dir = dir + "/" + family;
    const auto r = train::train(c, o);
    EXPECT_EQ(r.steps, 60);
    EXPECT_LT(r.eval_bpc, before - 2.0) << family << ": " << before << " -> " << r.eval_bpc;
    EXPECT_LT(r.eval_bpc, 4.0) << family;
    // The metrics file has one line per step plus the final evaluation.
    const auto lines = train::read_metrics(o.out_dir + "/metrics.jsonl");
    ASSERT_EQ(lines.size(), 61u);
    EXPECT_EQ(lines.back()["split"], "valid");
    EXPECT_NEAR(lines.back()["bpc"].get<double>(), r.eval_bpc, 1e-12);
    // Per-part gradient norms: every block has its own, and together they make grad_norm.
    for (const auto& l : {lines.front(), lines[lines.size() - 2]}) {
      ASSERT_TRUE(l.contains("grad_norms")) << l.dump();
      const auto& parts = l["grad_norms"];
      for (const char* part : {"tok_emb", "blocks.0", "blocks.1"}) {
        ASSERT_TRUE(parts.contains(part)) << family << ": " << parts.dump();
        EXPECT_GT(parts[part].get<double>(), 0) << family << " " << part;
      }
      EXPECT_FALSE(parts.contains("blocks")) << parts.dump();
      double sq = 0;
      for (const auto& [part, norm] : parts.items()) sq += norm.get<double>() * norm.get<double>();
      EXPECT_NEAR(std::sqrt(sq), l["grad_norm"].get<double>(), 1e-4 * l["grad_norm"].get<double>())
          << family << ": " << parts.dump();
    }
  }
}

TEST(Train, ResumeAfterAStopReproducesTheUninterruptedRun) {
  const std::string dir = seqmix::testing::temp_dir("train-resume");
  const std::string corpus = make_corpus(dir);
  auto c = tiny_config("weird-net", corpus);
  c.train.max_steps = 16;
  train::TrainOptions full;
  full.out_dir = dir + "/full";
  const auto r_full = train::train(c, full);

  train::TrainOptions part;
  part.out_dir = dir + "/part";
  part.halt_after_step = 7;
  const auto r_part = train::train(c, part);
  EXPECT_TRUE(r_part.halted);
  EXPECT_EQ(train::read_checkpoint_config(part.out_dir + "/checkpoint.pt").diff(c).size(), 0u);
  // The checkpoint holds the run's time up to step 7; the resumed run counts on from there.
  double stored = -1;
  {
    models::SequenceModel m(c.model);
    EXPECT_EQ(train::load_checkpoint(part.out_dir + "/checkpoint.pt", m, nullptr, &stored), 7);
  }
  EXPECT_GT(stored, 0);
  EXPECT_LE(stored, r_part.seconds);
  part.halt_after_step = -1;
  part.resume = true;
  // As `seqmix train --resume` does: the checkpoint the configuration came from, opened once
  // and handed over; the trainer frees its archive after loading.
  part.checkpoint = std::make_shared<train::CheckpointFile>(part.out_dir + "/checkpoint.pt");
  const auto r_resumed = train::train(c, part);
  EXPECT_EQ(r_resumed.steps, 16);
  EXPECT_THROW(part.checkpoint->tokenizer(), std::logic_error);
  EXPECT_EQ(part.checkpoint->config().diff(c).size(), 0u);
  EXPECT_GT(r_resumed.seconds, stored);

  auto losses = [](const std::string& path) {
    std::vector<double> v;
    for (const auto& l : train::read_metrics(path))
      if (l["split"] == "train") v.push_back(l["loss"].get<double>());
    return v;
  };
  const auto a = losses(full.out_dir + "/metrics.jsonl"),
             b = losses(part.out_dir + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  EXPECT_EQ(r_full.eval_bpc, r_resumed.eval_bpc);

  // Resuming with a different architecture is refused, naming the key.
  auto other = c;
  other.model.d_model = 32;
  try {
    train::train(other, part);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.d_model"), std::string::npos) << e.what();
  }
}

TEST(Train, SameSeedSameBatchesForDifferentModels) {
  // Batches are a function of (seed, step) only, so two families see identical data.
  const std::string dir = seqmix::testing::temp_dir("train-batches");
  const auto data = data::ByteCorpus::load(make_corpus(dir), "unused");
  const auto tokens = data::Tokenizer::bytes().encode(data.train());
  for (int64_t step = 0; step < 5; ++step)
    EXPECT_TRUE(at::equal(data::sample_batch(tokens, 8, 32, 5, step),
                          data::sample_batch(tokens, 8, 32, 5, step)));
}

TEST(Checkpoint, RoundTripAndCorruptFiles) {
  const std::string dir = seqmix::testing::temp_dir("ckpt");
  train::RunConfig c;
  c.model = models::make_model_config("moss", "tiny");
  torch::manual_seed(3);
  models::SequenceModel m(c.model);
  train::save_checkpoint(dir + "/a.pt", m, nullptr, c, 42);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.pt.tmp"));
  torch::manual_seed(4);
  models::SequenceModel m2(train::read_checkpoint_config(dir + "/a.pt").model);
  double seconds = -1;
  EXPECT_EQ(train::load_checkpoint(dir + "/a.pt", m2, nullptr, &seconds), 42);
  EXPECT_EQ(seconds, 0.0);
  auto p1 = m->parameters(), p2 = m2->parameters();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(at::equal(p1[i], p2[i]));
  train::save_checkpoint(dir + "/timed.pt", m, nullptr, c, 43, data::Tokenizer::bytes(), 12.5);
  EXPECT_EQ(train::load_checkpoint(dir + "/timed.pt", m2, nullptr, &seconds), 43);
  EXPECT_EQ(seconds, 12.5);
  {  // opened once, read three times
    train::CheckpointFile f(dir + "/timed.pt");
    EXPECT_EQ(f.config().diff(c).size(), 0u);
    EXPECT_TRUE(f.tokenizer().is_bytes());
    seconds = -1;
    EXPECT_EQ(f.load(m2, nullptr, &seconds), 43);
    EXPECT_EQ(seconds, 12.5);
    f.close();
    EXPECT_EQ(f.config().diff(c).size(), 0u);
    EXPECT_THROW(f.load(m2, nullptr), std::logic_error);
    EXPECT_THROW(train::CheckpointFile(dir + "/missing.pt"), std::runtime_error);
  }

  // Truncated file: clear error naming it; the good file stays readable.
  std::ifstream in(dir + "/a.pt", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/broken.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  try {
    train::read_checkpoint_config(dir + "/broken.pt");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.pt"), std::string::npos) << e.what();
  }
  // Corrupt archives found by fuzz/fuzz_checkpoint (tests/data/fuzz): one made LibTorch throw
  // torch::jit::ErrorReport (not c10::Error), one crashed its TorchScript type parser. The
  // archive is now checked (structure, CRCs) before LibTorch parses it.
  for (const char* name : {"checkpoint_unknown_type.pt", "checkpoint_parser_segv.pt"}) {
    const std::string fuzzed = SEQMIX_SOURCE_DIR "/tests/data/fuzz/" + std::string(name);
    try {
      train::read_checkpoint_config(fuzzed);
      ADD_FAILURE() << name << ": no error";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string(name) + "' is corrupt"), std::string::npos) << what;
      EXPECT_NE(what.find("(zip"), std::string::npos) << what;
    }
  }
  // One flipped bit in the middle of the file (stored entries: tensor or pickle bytes), which
  // only the entries' CRC-32s show.
  {
    std::string flipped = bytes;
    flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
    std::ofstream(dir + "/flipped.pt", std::ios::binary) << flipped;
    try {
      train::read_checkpoint_config(dir + "/flipped.pt");
      ADD_FAILURE() << "flipped.pt: no error";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("flipped.pt' is corrupt"), std::string::npos) << what;
      EXPECT_NE(what.find("CRC error"), std::string::npos) << what;
    }
  }
  std::ofstream(dir + "/text.pt") << "hello";
  EXPECT_THROW(train::read_checkpoint_config(dir + "/text.pt"), std::runtime_error);
  EXPECT_THROW(train::read_checkpoint_config(dir + "/none.pt"), std::runtime_error);

  // A model of another shape is refused, naming the parameter.
  auto other = c.model;
  other.d_model = 32;
  models::SequenceModel m3(other);
  try {
    train::load_checkpoint(dir + "/a.pt", m3, nullptr);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Train, SameSeedAndThreadsGiveBitIdenticalLosses) {
  // Over 100 steps, with 1 and with 2 threads: every kernel assigns each output (and each
  // partial sum of a parameter gradient) to a fixed thread and combines them in a fixed order.
  const std::string dir = seqmix::testing::temp_dir("train-determinism");
  const std::string corpus = make_corpus(dir);
  for (int64_t threads : {1, 2}) {
    for (const char* family : {"weird-net", "etsmlp-lm"}) {
      auto c = tiny_config(family, corpus);
      c.train.max_steps = 100;
      c.train.threads = threads;
      std::vector<double> losses[2];
      for (int k = 0; k < 2; ++k) {
        train::TrainOptions o;
        o.out_dir = dir + "/" + family + std::to_string(threads) + "-" + std::to_string(k);
        train::train(c, o);
        for (const auto& l : train::read_metrics(o.out_dir + "/metrics.jsonl"))
          if (l["split"] == "train") losses[k].push_back(l["loss"].get<double>());
      }
      ASSERT_EQ(losses[0].size(), 100u);
      EXPECT_EQ(losses[0], losses[1]) << family << ", " << threads << " threads";
    }
  }
}

TEST(Train, NonFiniteGradientStopsAndKeepsTheLastCheckpoint) {
  const std::string dir = seqmix::testing::temp_dir("train-nonfinite");
  const std::string corpus = make_corpus(dir);
  auto c = tiny_config("weird-net", corpus);
  c.train.max_steps = 20;
  c.train.checkpoint_interval = 5;
  // Plant a NaN in one gradient at step 8 (the first parameter in order stays finite).
  std::string victim;
  auto plant = [&](int64_t step, models::SequenceModel& m) {
    if (step != 8) return;
    for (const auto& p : m->named_parameters())
      if (p.key().find("blocks.1.") == 0 && p.value().grad().defined()) {
        victim = p.key();
        p.value().mutable_grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
        return;
      }
  };
  train::TrainOptions o;
  o.out_dir = dir + "/stop";
  o.after_backward = plant;
  try {
    train::train(c, o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + victim + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(step 5) is intact"), std::string::npos) << msg;
  }
  // The checkpoint on disk is the one from step 5, and it loads.
  models::SequenceModel m(c.model);
  EXPECT_EQ(train::load_checkpoint(o.out_dir + "/checkpoint.pt", m, nullptr), 5);

  // train.nonfinite = skip: the step is skipped, training finishes with finite weights.
  c.train.nonfinite = "skip";
  train::TrainOptions s;
  s.out_dir = dir + "/skip";
  s.after_backward = plant;
  const auto r = train::train(c, s);
  EXPECT_EQ(r.steps, 20);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(r.eval_bpc));
  int events = 0;
  for (const auto& l : train::read_metrics(s.out_dir + "/metrics.jsonl"))
    if (l.value("event", "") == "skipped_step") {
      ++events;
      EXPECT_EQ(l["step"], 8);
      EXPECT_NE(l["reason"].get<std::string>().find(victim), std::string::npos);
    }
  EXPECT_EQ(events, 1);
}

TEST(Train, SkippedStepLeavesBatchNormStatisticsAsTheyWere) {
  // A skipped step must not keep what its forward pass folded into BatchNorm's running
  // statistics: here the hook plants a NaN there (as a NaN batch would) and in a gradient.
  const std::string dir = seqmix::testing::temp_dir("train-skip-bn");
  auto c = tiny_config("etsmlp-lm", make_corpus(dir));
  c.model.norm_type = "batch";
  c.train.max_steps = 6;
  c.train.nonfinite = "skip";
  train::TrainOptions o;
  o.out_dir = dir + "/run";
  o.after_backward = [](int64_t step, models::SequenceModel& m) {
    if (step != 3) return;
    torch::NoGradGuard ng;
    for (auto& b : m->named_buffers())
      if (b.key().find("running_mean") != std::string::npos)
        b.value().fill_(std::numeric_limits<float>::quiet_NaN());
    m->parameters().front().mutable_grad().fill_(std::numeric_limits<float>::quiet_NaN());
  };
  const auto r = train::train(c, o);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(r.eval_bpc)) << "BatchNorm statistics kept the NaN";
}
