// Files written by seqmix 0.1.0, before the per-mixer configuration sections, keep loading
// and give the same results (tests/data/legacy/README.md says how they were made).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "seqmix/models/sequence_model.h"
#include "seqmix/train/checkpoint.h"
#include "seqmix/train/config.h"
#include "support/cli.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

const std::string kDir = std::string(SEQMIX_SOURCE_DIR) + "/tests/data/legacy";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The flat keys of the fixture, as they were set when it was made.
void expect_fixture_model(const models::ModelConfig& m) {
  EXPECT_EQ(m.mixers, (std::vector<std::string>{"aib", "attention", "extractor", "etsmlp"}));
  EXPECT_EQ(m.aib.weights, "exp");
  EXPECT_FALSE(m.aib.bias);
  EXPECT_EQ(m.aib.impl, "kernel");  // written as 'fused'
  EXPECT_EQ(m.attention.impl, "kernel");
  EXPECT_TRUE(m.ces.gate);
  EXPECT_EQ(m.ces.shortcut, "omega");
  EXPECT_DOUBLE_EQ(m.ces.r_min, 0.1);
  EXPECT_DOUBLE_EQ(m.ces.max_lambda, 0.9999);
  EXPECT_FALSE(m.extractor.adjust);
  EXPECT_TRUE(m.extractor.out_proj);
  EXPECT_EQ(m.extractor.impl, "kernel");  // written as 'fft'
  EXPECT_EQ(m.d_model, 16);
  EXPECT_EQ(m.n_layers, 4);
}

}  // namespace

TEST(Legacy, FlatConfigFileReadsIntoSections) {
  const auto c = train::RunConfig::from_toml(read_file(kDir + "/config.toml"), "legacy config");
  expect_fixture_model(c.model);
  EXPECT_EQ(c.train.seed, 7);
  // Written back, it has the sections and no flat key, and reads back the same.
  const std::string text = c.to_toml();
  EXPECT_NE(text.find("[model.aib]"), std::string::npos) << text;
  EXPECT_EQ(text.find("aib_weights"), std::string::npos) << text;
  EXPECT_TRUE(train::RunConfig::from_toml(text, "rewritten").diff(c).empty());
}

TEST(Legacy, FlatConfigFileAndOverridesResolve) {
  const auto c = train::resolve_config(kDir + "/config.toml", {"model.aib_weights=ones"});
  EXPECT_EQ(c.model.aib.weights, "ones");
  EXPECT_TRUE(c.model.ces.gate);
  const auto d = train::resolve_config("", {"model.aib_impl=fused", "model.extractor_impl=fft"});
  EXPECT_EQ(d.model.aib.impl, "kernel");
  EXPECT_EQ(d.model.extractor.impl, "kernel");
  // The new spelling only takes the new names.
  EXPECT_THROW(train::resolve_config("", {"model.aib.impl=fused"}), std::runtime_error);
}

TEST(Legacy, OldAndNewNameTogetherIsAnError) {
  const std::string dir = seqmix::testing::temp_dir("legacy");
  const std::string path = dir + "/both.toml";
  std::ofstream(path) << "[model]\naib_weights = 'exp'\n[model.aib]\nweights = 'ones'\n";
  try {
    train::resolve_config(path, {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.aib_weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.aib.weights"), std::string::npos) << e.what();
  }
}

TEST(Legacy, HostileMixesOfOldAndNewNamesAreErrors) {
  const std::string dir = seqmix::testing::temp_dir("legacy-hostile");
  auto error_of = [&](const std::string& text, const std::vector<std::string>& overrides) {
    const std::string path = dir + "/c.toml";
    std::ofstream(path) << text;
    try {
      train::resolve_config(text.empty() ? "" : path, overrides);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A section that is not a table next to an old key for it (crashed the key mapping).
  EXPECT_NE(error_of("[model]\naib = 5\naib_weights = 'exp'\n", {}).find(
                "'model.aib' must be a table"),
            std::string::npos);
  EXPECT_NE(error_of("[[model.ces]]\n[model]\nces_gate = true\n", {}).find("must be a table"),
            std::string::npos);
  // Only the two old names of the kernel map to it; other values stay errors.
  EXPECT_NE(error_of("[model]\nces_impl = 'fft'\n", {}).find("model.ces.impl"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.attention_impl=fused"}).find("model.attention.impl"),
            std::string::npos);
  EXPECT_EQ(train::resolve_config("", {"model.aib_impl='fused'"}).model.aib.impl, "kernel");
  // The old and the new name of one key in overrides: refused in either order.
  for (const auto& pair : {std::vector<std::string>{"model.aib_weights=exp", "model.aib.weights=ones"},
                           std::vector<std::string>{"model.aib.weights=ones", "model.aib_weights=exp"}})
    EXPECT_NE(error_of("", pair).find("the old and the new name of one key"), std::string::npos);
  EXPECT_NE(error_of("", {".x=1"}).find("section.key=value"), std::string::npos);
  EXPECT_NE(error_of("", {"model..x=1"}).find("section.key=value"), std::string::npos);
}

TEST(Legacy, CheckpointLoadsIntoTheSameModel) {
  const std::string ckpt = kDir + "/checkpoint.pt";
  const train::RunConfig c = train::read_checkpoint_config(ckpt);
  expect_fixture_model(c.model);
  models::SequenceModel model(c.model);
  EXPECT_EQ(train::load_checkpoint(ckpt, model, nullptr), 3);  // its step
}

TEST(Legacy, CheckpointEvaluatesAndGeneratesAsBefore) {
  // What seqmix 0.1.0 printed for the same commands (tests/data/legacy/README.md).
  const auto want = nlohmann::json::parse(read_file(kDir + "/expected_eval.json"));
  const auto r = seqmix::testing::run_cli("eval " + kDir + "/checkpoint.pt --data " + kDir +
                                  "/text.txt --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = seqmix::testing::json_lines(r.output);
  ASSERT_FALSE(rows.empty()) << r.output;
  const auto& got = rows.back();
  EXPECT_EQ(got["tokens"], want["tokens"]);
  const double want_bpc = want["bpc"], got_bpc = got["bpc"];
  EXPECT_NEAR(got_bpc, want_bpc, 1e-6 * want_bpc);
  EXPECT_NE(r.output.find("deprecated flat keys"), std::string::npos) << r.output;

  // The generated text is stdout alone (notes and statistics go to stderr).
  const std::string out = seqmix::testing::temp_dir("legacy") + "/generated.txt";
  const std::string cmd = seqmix::testing::seqmix_bin() + " generate " + kDir +
                          "/checkpoint.pt --prompt 'The ' --max-new-tokens 40 --seed 3 "
                          "--temperature 1 > " + out + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(read_file(out), read_file(kDir + "/expected_generate.txt"));
}
