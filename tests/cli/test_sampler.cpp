// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): `seqmix generate`: sampling
// (include/seqmix/generate/sampler.h) from the command line.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "seqmix/generate/sampler.h"
#include "seqmix/models/presets.h"
#include "seqmix/util/blas.h"
#include "support/cli.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

TEST(Generate, CliThreadsWaitPolicyAndRate) {
  const std::string dir = seqmix::testing::temp_dir("generate-rate");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const std::string run = dir + "/run";
  const auto trained = seqmix::testing::run_cli(
      "train --size tiny --max-len 32 --batch-size 4 --max-steps 3 --threads 1 --data " + corpus +
      " --out " + run);
  ASSERT_EQ(trained.code, 0) << trained.output;
  const auto one = seqmix::testing::run_cli("generate " + run + " --max-new-tokens 20",
                                            "-u OMP_WAIT_POLICY");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("20 new bytes in "), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("bytes/s, 1 thread)"), std::string::npos) << one.output;
  const auto two = seqmix::testing::run_cli("generate " + run + " --max-new-tokens 20 --threads 2",
                                            "-u OMP_WAIT_POLICY");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("2 threads, OMP_WAIT_POLICY=passive (set by seqmix)"),
            std::string::npos)
      << two.output;
  const auto user = seqmix::testing::run_cli(
      "generate " + run + " --max-new-tokens 20 --threads 2", "OMP_WAIT_POLICY=active");
  ASSERT_EQ(user.code, 0) << user.output;
  EXPECT_NE(user.output.find("2 threads, OMP_WAIT_POLICY=active)"), std::string::npos)
      << user.output;
  std::filesystem::remove_all(dir);
}
}  // namespace
