// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): `seqmix data listops`: the
// ListOps generator (include/seqmix/data/listops.h) from the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "seqmix/data/listops.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using seqmix::data::LabelledSequence;
using seqmix::data::ListOpsOptions;
namespace lo = seqmix::data::listops;

TEST(ListOps, CliRefusesTreesThatOutgrowMaxLengthWithoutCreatingTheFolder) {
  const std::string dir = seqmix::testing::temp_dir("listops-cli-long");
  const std::string out = dir + "/out";
  const auto r = seqmix::testing::run_cli(
      "data listops --train 1 --valid 1 --test 1 --max-depth 1000 --max-args 1000 "
      "--min-length 999990 --max-length 1000000 --out " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("draws in a row gave no new tree"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

// Depth is handled without recursion: at the deepest allowed setting, with an argument count
// that makes the trees' growth critical (a quarter of the nodes are operators with 4
// arguments on average), long sequences nest far deeper than LRA's 10 levels.
TEST(ListOps, CliRefusesAHugeDepthWithoutCreatingTheFolder) {
  const std::string dir = seqmix::testing::temp_dir("listops-cli");
  const std::string out = dir + "/out";
  const auto r = seqmix::testing::run_cli("data listops --out " + out +
                                          " --max-depth 100000 --train 10 --valid 2 --test 2");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--max-depth must be in [1, 1000], got 100000"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  const auto s = seqmix::testing::run_cli("data listops --out " + out + " --seed -1");
  EXPECT_EQ(s.code, 1) << s.output;
  EXPECT_NE(s.output.find("--seed must be >= 0, got -1"), std::string::npos) << s.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

// A task's token ids are its own: a tokenizer with --task is refused by its flag before any
// folder is made (it used to surface as a model.vocab_size mismatch the user never set).
TEST(ListOps, TrainRefusesATokenizerWithATask) {
  const std::string dir = seqmix::testing::temp_dir("listops-tokenizer");
  const std::string out = dir + "/out";
  for (const char* tok : {"bytes", "tok.model"}) {
    const auto r = seqmix::testing::run_cli("train --task listops --max-steps 1 --tokenizer " +
                                            std::string(tok) + " --out " + out);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("--tokenizer does not apply with --task: task 'listops' brings "
                            "its own token ids"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  std::filesystem::remove_all(dir);
}
}  // namespace
