#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "seqmix/nn/aib_attention.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/schedule.h"
#include "seqmix/util/device.h"
#include "support/gradcheck.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using namespace seqmix;

namespace {

TEST(Config, PresetThenFileThenOverrides) {
  const std::string dir = seqmix::testing::temp_dir("config");
  std::ofstream(dir + "/c.toml") << "[model]\npreset = 'transformer'\nsize = 'tiny'\nd_ff = 300\n"
                                    "[train]\nlr = 1\nmax_steps = 7\n";
  auto c = train::resolve_config(
      dir + "/c.toml", {"train.max_steps=9", "model.mixers=['aib']", "data.source=moby-dick"});
  EXPECT_EQ(c.model.preset, "transformer");
  EXPECT_EQ(c.model.d_model, 64);     // from the tiny preset
  EXPECT_EQ(c.model.d_ff, 300);       // from the file
  EXPECT_DOUBLE_EQ(c.train.lr, 1.0);  // integer accepted for a number
  EXPECT_EQ(c.train.max_steps, 9);    // override wins
  EXPECT_EQ(c.model.mixers, std::vector<std::string>{"aib"});
  EXPECT_EQ(c.data.source, "moby-dick");
  // Round trip through TOML.
  auto back = train::RunConfig::from_toml(c.to_toml(), "test");
  EXPECT_TRUE(back.diff(c).empty());
  EXPECT_EQ(c.to_toml(), back.to_toml());
}

TEST(Config, ErrorsNameTheKey) {
  const std::string dir = seqmix::testing::temp_dir("config-bad");
  std::ofstream(dir + "/bad.toml") << "[train]\nlearning_rate = 3\n";
  auto e = error_of([&] { train::resolve_config(dir + "/bad.toml", {}); });
  EXPECT_NE(e.find("bad.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("train.learning_rate"), std::string::npos) << e;
  std::ofstream(dir + "/type.toml") << "[model]\nd_model = 'wide'\n";
  e = error_of([&] { train::resolve_config(dir + "/type.toml", {}); });
  EXPECT_NE(e.find("model.d_model' must be an integer"), std::string::npos) << e;
  std::ofstream(dir + "/syntax.toml") << "[model\n";
  e = error_of([&] { train::resolve_config(dir + "/syntax.toml", {}); });
  EXPECT_NE(e.find("not valid TOML"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config(dir + "/missing.toml", {}); });
  EXPECT_NE(e.find("missing.toml"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"model.preset=gpt"}); });
  EXPECT_NE(e.find("unknown model preset 'gpt'"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"train.batch_size=0"}); });
  EXPECT_NE(e.find("train.batch_size"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"data.pad_to_multiple=0"}); });
  EXPECT_NE(e.find("data.pad_to_multiple: must be >= 1, got 0"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"nosection"}); });
  EXPECT_NE(e.find("section.key=value"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"optim.lr=1"}); });
  EXPECT_NE(e.find("unknown section 'optim'"), std::string::npos) << e;
  // A whole configuration (as in a checkpoint) with a float far outside int64 where an
  // integer belongs: undefined behaviour inside toml++ before (found by fuzz/fuzz_config).
  std::ifstream in(SEQMIX_SOURCE_DIR "/tests/data/fuzz/config_huge_float_integer.toml");
  const std::string fuzzed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(fuzzed.find("max_len = 444444"), std::string::npos);
  e = error_of([&] { train::RunConfig::from_toml(fuzzed, "fuzzed"); });
  EXPECT_NE(e.find("fuzzed"), std::string::npos) << e;
  EXPECT_NE(e.find("must be an integer, got a floating-point number"), std::string::npos) << e;
  auto c = train::RunConfig::from_toml(train::RunConfig{}.to_toml(), "ok").to_toml();
  const auto at = c.find("max_len = ");
  ASSERT_NE(at, std::string::npos);
  c.insert(at + 10, "1e30 # ");
  e = error_of([&] { train::RunConfig::from_toml(c, "dumped"); });
  EXPECT_NE(e.find("max_len' must be an integer"), std::string::npos) << e;
}

// train.device: cpu, cuda or cuda:N, parsed anywhere; a stored configuration from before the
// key reads as "cpu"; resolving a configuration to train checks that the device is here.
TEST(Config, TrainDevice) {
  EXPECT_EQ(train::RunConfig{}.train.device, "cpu");
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:10"})
    EXPECT_EQ(util::device_error(ok), "") << ok;
  for (const char* bad :
       {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:01", "cpu:0", "cuda:123456"}) {
    const std::string set = std::string("train.device=") + bad;
    const auto e = error_of([&] { train::resolve_config("", {set}); });
    EXPECT_NE(e.find("train.device: must be 'cpu', 'cuda' or 'cuda:N' (N a GPU index), got '" +
                     std::string(bad) + "'"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(util::device_error(""), "");
  EXPECT_NE(util::device_error("cuda:0 "), "");
  EXPECT_EQ(util::parse_device("cuda:3", "k"), c10::Device(c10::kCUDA, 3));
  EXPECT_EQ(util::parse_device("cuda", "k"), c10::Device(c10::kCUDA, 0));
  std::string old = train::RunConfig{}.to_toml();
  const auto at = old.find("device = 'cpu'\n");
  ASSERT_NE(at, std::string::npos) << old;
  old.erase(at, std::string("device = 'cpu'\n").size());
  EXPECT_EQ(train::RunConfig::from_toml(old, "old run").train.device, "cpu");
  EXPECT_EQ(train::resolve_config("", {"train.device=cpu"}).train.device, "cpu");
  if (!torch::cuda::is_available()) {
    const auto e = error_of([&] { train::resolve_config("", {"train.device=cuda"}); });
    EXPECT_NE(e.find("train.device = 'cuda' but no CUDA device is available "
                     "(torch.cuda.is_available() is false)"),
              std::string::npos)
        << e;
    // A stored configuration naming a GPU still parses (it is evaluated where --device says).
    train::RunConfig gpu;
    gpu.train.device = "cuda:1";
    EXPECT_EQ(train::RunConfig::from_toml(gpu.to_toml(), "gpu run").train.device, "cuda:1");
    EXPECT_NO_THROW(gpu.check_resources(false));
  }
}

TEST(Config, OneSpellingPerKeyAndValue) {
  // Mixer options live in their sections ([model.aib] weights); a flat key is unknown, and
  // every op's optimised implementation is "kernel".
  const std::string dir = seqmix::testing::temp_dir("config-spelling");
  std::ofstream(dir + "/flat.toml") << "[model]\naib_weights = 'exp'\n";
  auto e = error_of([&] { train::resolve_config(dir + "/flat.toml", {}); });
  EXPECT_NE(e.find("model.aib_weights"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"model.ces_gate=true"}); });
  EXPECT_NE(e.find("model.ces_gate"), std::string::npos) << e;
  for (const char* o : {"model.aib.impl=fused", "model.extractor.impl=fft"}) {
    e = error_of([&] { train::resolve_config("", {o}); });
    EXPECT_NE(e.find("impl"), std::string::npos) << e;
    EXPECT_NE(e.find("kernel"), std::string::npos) << e;
  }
  EXPECT_EQ(train::resolve_config("", {"model.aib.weights=exp"})
                .model.options<nn::AIBAttentionOptions>("aib")
                .weights(),
            ops::AIBWeights::exp);
  // A section given as something other than a table.
  std::ofstream(dir + "/scalar.toml") << "[model]\naib = 5\n";
  e = error_of([&] { train::resolve_config(dir + "/scalar.toml", {}); });
  EXPECT_NE(e.find("model.aib"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {".x=1"}); });
  EXPECT_NE(e.find("section.key=value"), std::string::npos) << e;
  e = error_of([&] { train::resolve_config("", {"model..x=1"}); });
  EXPECT_NE(e.find("section.key=value"), std::string::npos) << e;
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  train::TrainConfig t;
  t.lr = 1.0;
  t.warmup_steps = 10;
  t.max_steps = 110;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(train::learning_rate(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(train::learning_rate(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(train::learning_rate(t, 10), 1.0);
  EXPECT_NEAR(train::learning_rate(t, 60), 0.55, 1e-12);
  EXPECT_NEAR(train::learning_rate(t, 110), 0.1, 1e-12);
  t.schedule = "linear";
  EXPECT_NEAR(train::learning_rate(t, 60), 0.55, 1e-12);
  EXPECT_NEAR(train::learning_rate(t, 35), 0.775, 1e-12);
}

}  // namespace
