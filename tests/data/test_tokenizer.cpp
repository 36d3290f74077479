// Tokenizers (bytes and SentencePiece BPE), BPE language-model runs (checkpointed tokenizer,
// perplexity, decoding) and the fair comparison runner.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/generate/sampler.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/reporting/compare.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/signals.h"
#include "support/gradcheck.h"

using namespace seqmix;
namespace fs = std::filesystem;

namespace {

// English-like text with a small vocabulary, enough for a few hundred BPE merges.
std::string make_text(int lines) {
  const char* words[] = {"whale", "ship", "sea", "captain", "harpoon", "the", "a", "of",
                         "and", "to", "white", "great", "boat", "crew", "deck", "wind",
                         "storm", "night", "sailed", "watched", "ocean", "Ahab", "Ishmael"};
  std::string text;
  uint32_t s = 7;
  for (int i = 0; i < lines; ++i) {
    const int n = 4 + static_cast<int>((s >> 20) % 8);
    for (int w = 0; w < n; ++w) {
      s = s * 1664525u + 1013904223u;
      text += std::string(w ? " " : "") + words[(s >> 10) % 23];
    }
    text += (i % 7 == 0) ? ".\n\n" : ",\n";
  }
  return text;
}

const data::Tokenizer& small_bpe() {
  static const data::Tokenizer t = [] {
    data::TokenizerOptions o;
    o.vocab_size = 400;
    o.threads = 1;
    return data::Tokenizer::train(make_text(3000), o);
  }();
  return t;
}

std::string write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

// Encoding in newline-cut pieces, with interrupt checks between them, gives the ids of one
// whole encoding, for BPE and unigram models; a check that throws stops it.
TEST(Tokenizer, InterruptibleEncodingIsTheWholeEncoding) {
  data::TokenizerOptions o;
  o.vocab_size = 320;  // unigram: at most 328 pieces for this text
  o.threads = 1;
  o.model_type = "unigram";
  const data::Tokenizer unigram = data::Tokenizer::train(make_text(3000), o);
  const std::string text = make_text(400) + "  trailing spaces  \n\r\n\n\nno newline at the end \xff";
  for (const data::Tokenizer* t : {&small_bpe(), &unigram}) {
    const data::TokenIds whole = t->encode(text);
    for (const size_t chunk : {size_t{1}, size_t{7}, size_t{100}, size_t{4096}, text.size()})
      EXPECT_EQ(t->encode_interruptible(text, chunk), whole) << t->name() << " chunk " << chunk;
  }
  int calls = 0;
  const util::ScopedInterruptCheck stop([&] {
    if (++calls == 3) throw std::runtime_error("stopped");
  });
  EXPECT_THROW(small_bpe().encode_interruptible(text, 100), std::runtime_error);
  EXPECT_EQ(calls, 3);
}

TEST(Tokenizer, BytesAreTheIdentity) {
  const auto t = data::Tokenizer::bytes();
  EXPECT_TRUE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const auto ids = t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(t.decode(ids), all);
  EXPECT_THROW(t.decode({256}), std::out_of_range);
}

TEST(Tokenizer, BpeRoundTripsAnyBytes) {
  const auto& t = small_bpe();
  EXPECT_FALSE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), 400);
  const std::string text = make_text(200);
  const auto ids = t.encode(text);
  // Merges learned: well under one token per byte on text like the training text.
  EXPECT_LT(static_cast<double>(ids.size()), 0.5 * static_cast<double>(text.size()));
  EXPECT_EQ(t.decode(ids), text);
  // Text it never saw: leading, repeated and trailing spaces, tabs, CRLF, control bytes,
  // NUL and non-ASCII UTF-8 all come back byte for byte (byte fallback).
  std::string odd = "  Ahab\t\tsailed  \r\n\nÉcole — naïve 😀 ünseen ẞ end ";
  for (int b = 0; b < 128; ++b) odd += static_cast<char>(b);
  const auto odd_ids = t.encode(odd);
  for (const int32_t id : odd_ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 400);
  }
  EXPECT_EQ(t.decode(odd_ids), odd);
  // U+2581, SentencePiece's own space symbol, stays itself (it used to decode as a space:
  // found by fuzz/fuzz_bpe_corpus, whose input is kept in tests/data/fuzz/).
  for (const std::string meta : {"\xe2\x96\x81", "a\xe2\x96\x81 b", "\xe2\x96\x81\xe2\x96\x81x",
                                 "x\xe2\x96\x81"}) {
    EXPECT_EQ(t.decode(t.encode(meta)), meta);
  }
  std::ifstream found(SEQMIX_SOURCE_DIR "/tests/data/fuzz/bpe_meta_space.txt", std::ios::binary);
  const std::string fuzzed((std::istreambuf_iterator<char>(found)), std::istreambuf_iterator<char>());
  ASSERT_EQ(fuzzed.size(), 21u);
  EXPECT_EQ(t.decode(t.encode(fuzzed)), fuzzed);
  // SentencePiece validates UTF-8 before encoding: a malformed sequence becomes U+FFFD.
  EXPECT_EQ(t.decode(t.encode("a\xff b")), "a\xEF\xBF\xBD b");
  EXPECT_THROW(t.decode({400}), std::out_of_range);
  EXPECT_THROW(t.decode({-1}), std::out_of_range);
}

TEST(Tokenizer, TrainingIsDeterministicAndValidated) {
  data::TokenizerOptions o;
  o.vocab_size = 400;
  o.threads = 1;
  EXPECT_TRUE(data::Tokenizer::train(make_text(3000), o).same_as(small_bpe()));
  o.vocab_size = 100;
  EXPECT_THROW(data::Tokenizer::train("abc", o), std::invalid_argument);
  o.vocab_size = 400;
  o.model_type = "wordpiece";
  EXPECT_THROW(data::Tokenizer::train("abc", o), std::invalid_argument);
  // Far too little text for 5000 pieces: SentencePiece's own message, as an exception.
  o.model_type = "bpe";
  o.vocab_size = 5000;
  try {
    data::Tokenizer::train("tiny text\n", o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer training failed"), std::string::npos)
        << e.what();
  }
  // Every line longer than SentencePiece takes: said before SentencePiece fails silently.
  o.vocab_size = 400;
  o.max_sentence_length = 64;
  try {
    data::Tokenizer::train(std::string(100, 'a') + "\n" + std::string(70, 'b'), o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no line of 1 to 64 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(Tokenizer, SaveLoadAndCorruptModels) {
  const std::string dir = seqmix::testing::temp_dir("tokenizer-files");
  const std::string path = dir + "/bpe.model";
  small_bpe().save(path);
  EXPECT_TRUE(data::Tokenizer::load(path).same_as(small_bpe()));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto expect_error = [](const std::string& file, const std::string& needle) {
    try {
      data::Tokenizer::load(file);
      FAIL() << file << ": no error";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + file + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error(dir + "/missing.model", "does not exist");
  expect_error(write(dir + "/garbage.model", "this is not a protobuf\n"),
               "is not a SentencePiece model");
  expect_error(write(dir + "/empty.model", ""), "is not a SentencePiece model");
  const std::string& proto = small_bpe().serialized();
  expect_error(write(dir + "/truncated.model", proto.substr(0, proto.size() / 2)),
               "is not a SentencePiece model");
  // A model SentencePiece's loader throws on (instead of returning a status); the plugin
  // leaked the processor on this path (found by fuzz/fuzz_tokenizer under LeakSanitizer).
  expect_error(SEQMIX_SOURCE_DIR "/tests/data/fuzz/spm_model_throws.model",
               "is not a SentencePiece model");
  // A failed save leaves the good file alone.
  EXPECT_THROW(small_bpe().save(dir + "/no/such/dir/x.model"), std::runtime_error);
  EXPECT_THROW(data::Tokenizer::bytes().save(dir + "/bytes.model"), std::logic_error);
}

TEST(Tokenizer, TokenCorpusAndBatches) {
  const std::string dir = seqmix::testing::temp_dir("tokenizer-corpus");
  const auto corpus = data::ByteCorpus::load(write(dir + "/c.txt", make_text(1000)), "unused");
  const auto tokens = data::TokenCorpus::build(corpus, small_bpe());
  EXPECT_EQ(small_bpe().decode(tokens.train), corpus.train());
  EXPECT_EQ(small_bpe().decode(tokens.eval), corpus.eval());
  EXPECT_EQ(tokens.eval_bytes, static_cast<int64_t>(corpus.eval().size()));
  EXPECT_NE(tokens.description.find("tokens (sentencepiece-400)"), std::string::npos)
      << tokens.description;
  const at::Tensor b = data::sample_batch(tokens.train, 4, 16, 3, 0);
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{4, 17}));
  EXPECT_LT(b.max().item<int64_t>(), 400);
  EXPECT_TRUE(at::equal(b, data::sample_batch(tokens.train, 4, 16, 3, 0)));
}

namespace {

train::RunConfig bpe_config(const std::string& corpus, const std::string& tokenizer) {
  auto c = train::resolve_config(
      "", {"model.preset=transformer-plain", "model.size=tiny", "model.max_len=32",
           "model.n_layers=2", "model.vocab_size=400", "data.source=" + corpus,
           "data.tokenizer=" + tokenizer, "train.batch_size=8", "train.max_steps=40",
           "train.lr=3e-3", "train.eval_interval=0", "train.checkpoint_interval=0",
           "train.log_interval=10", "train.threads=1", "train.seed=3"});
  return c;
}

}  // namespace

TEST(BpeRun, LearnsStoresItsTokenizerAndGenerates) {
  const std::string dir = seqmix::testing::temp_dir("bpe-run");
  const std::string corpus = write(dir + "/c.txt", make_text(2000));
  const std::string tok = dir + "/bpe.model";
  small_bpe().save(tok);
  const auto config = bpe_config(corpus, tok);
  train::TrainOptions o;
  o.out_dir = dir + "/run";
  const auto r = train::train(config, o);
  // Uniform over 400 pieces is ln 400 = 5.99 nats per token; the grammar is easy to learn.
  EXPECT_LT(r.eval_loss, 4.0);
  EXPECT_NEAR(r.eval_perplexity, std::exp(r.eval_loss), 1e-9 * r.eval_perplexity);
  const auto lines = train::read_metrics(o.out_dir + "/metrics.jsonl");
  const auto& last = lines.back();
  EXPECT_EQ(last.at("split"), "valid");
  EXPECT_TRUE(last.contains("perplexity"));
  EXPECT_GT(last.at("bytes").get<int64_t>(), 2 * last.at("tokens").get<int64_t>());
  EXPECT_TRUE(lines.front().contains("perplexity"));
  EXPECT_FALSE(lines.front().contains("bpc"));  // a training token is not a byte

  // The checkpoint carries the tokenizer, so it decodes after the model file is gone.
  EXPECT_TRUE(fs::exists(o.out_dir + "/tokenizer.model"));
  fs::remove(tok);
  const std::string ckpt = o.out_dir + "/checkpoint.pt";
  const auto stored = train::read_checkpoint_tokenizer(ckpt);
  EXPECT_TRUE(stored.same_as(small_bpe()));
  auto cfg = train::read_checkpoint_config(ckpt);
  models::SequenceModel model(cfg.model);
  train::load_checkpoint(ckpt, model, nullptr);
  generate::SamplingOptions s;
  s.top_p = 0.6;
  std::string streamed;
  const std::string text = generate::generate_text(model, stored, "the whale", 30, s, 1,
                                                   [&](const std::string& t) { streamed += t; });
  EXPECT_EQ(streamed, text);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text, generate::generate_text(model, stored, "the whale", 30, s, 1));
  // A trained model has learned the vocabulary: samples are mostly known words.
  int known = 0, total = 0;
  std::istringstream words(text);
  for (std::string w; words >> w; ++total)
    if (make_text(3000).find(w) != std::string::npos) ++known;
  EXPECT_GE(known * 2, total) << text;
  // Evaluating with the wrong tokenizer is refused.
  EXPECT_THROW(train::evaluate(model, {1, 2, 3}, data::Tokenizer::bytes(), 4),
               std::invalid_argument);
}

TEST(BpeRun, VocabularyMismatchAndChangedTokenizerAreErrors) {
  const std::string dir = seqmix::testing::temp_dir("bpe-errors");
  const std::string corpus = write(dir + "/c.txt", make_text(500));
  const std::string tok = dir + "/bpe.model";
  small_bpe().save(tok);
  auto config = bpe_config(corpus, tok);
  config.model.vocab_size = 256;
  train::TrainOptions o;
  o.out_dir = dir + "/run";
  try {
    train::train(config, o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("set model.vocab_size=400"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train::resolve_config("", {"model.vocab_size=400"}), std::runtime_error);

  config = bpe_config(corpus, tok);
  config.train.max_steps = 4;
  train::train(config, o);
  // Another model file under the same path: resuming would continue a different experiment.
  data::TokenizerOptions other;
  other.vocab_size = 400;
  other.threads = 1;
  other.seed = 99;
  data::Tokenizer::train(make_text(300) + "completely different words here\n", other).save(tok);
  config.train.max_steps = 8;
  o.resume = true;
  try {
    train::train(config, o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("has changed since checkpoint"), std::string::npos)
        << e.what();
  }
}

TEST(Compare, SameBatchesPerBatchCostPlotAndReuse) {
  const std::string dir = seqmix::testing::temp_dir("compare");
  const std::string corpus = write(dir + "/c.txt", make_text(800));
  train::CompareOptions o;
  o.out_dir = dir + "/out";
  o.shared_overrides = {"model.size=tiny",        "model.max_len=16",     "model.n_layers=1",
                        "data.source=" + corpus,  "train.batch_size=4",   "train.max_steps=12",
                        "train.eval_interval=0",  "train.threads=1",      "train.checkpoint_interval=0"};
  o.bucket = 5;
  o.seeds = 1;
  // Two identical models: identical per-batch costs prove identical batches in identical order.
  o.models = {train::parse_compare_model("a=transformer"),
              train::parse_compare_model("b=transformer"),
              train::parse_compare_model("c=weird-net-a")};
  const auto r = train::compare(o);
  ASSERT_EQ(r.rows.size(), 3u);
  auto costs = [&](const std::string& name) {
    std::vector<double> c;
    for (const auto& line : train::read_metrics(o.out_dir + "/" + name + "/metrics.jsonl"))
      if (line.at("split") == "train") c.push_back(line.at("loss").get<double>());
    return c;
  };
  EXPECT_EQ(costs("a").size(), 12u);
  EXPECT_EQ(costs("a"), costs("b"));
  EXPECT_NE(costs("a"), costs("c"));
  EXPECT_EQ(r.rows[0].steps, 12);
  EXPECT_GT(r.rows[2].eval_loss, 0);
  // Buckets 1-5, 6-10, 11-12 per model, each q1 <= median <= q3.
  std::ifstream dat(o.out_dir + "/compare.dat");
  int rows = 0;
  for (std::string line; std::getline(dat, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    double first, last, q1, med, q3;
    in >> first >> last >> q1 >> med >> q3;
    EXPECT_LE(q1, med);
    EXPECT_LE(med, q3);
    ++rows;
  }
  EXPECT_EQ(rows, 9);
  EXPECT_EQ(train::read_metrics(o.out_dir + "/summary.jsonl").size(), 3u);
  ASSERT_FALSE(r.plot.empty()) << "gnuplot is installed by scripts/setup.sh";
  std::ifstream png(r.plot, std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");

  // Finished runs are reused, not retrained.
  const auto again = train::compare(o);
  for (const auto& row : again.rows) EXPECT_TRUE(row.reused) << row.name;
  EXPECT_EQ(costs("a").size(), 12u);

  // A model that would draw other batches is refused before anything trains.
  o.models.push_back(train::parse_compare_model("d=transformer train.seed=9"));
  try {
    train::compare(o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'d' differs from 'a' in train.seed"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_dir + "/d"));
}
