// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): `seqmix data pathfinder`: the
// Pathfinder generator's export options from the command line.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/data/pathfinder.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

TEST(Pathfinder, CliRefusesBadExportOptionsWithoutCreatingTheFolder) {
  const std::string dir = seqmix::testing::temp_dir("pathfinder-cli");
  const std::string out = dir + "/out";
  for (const auto& [flags, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--resolution 100000", "--resolution"},
           {"--resolution 8", "--resolution"},
           {"--count 1000000000", "--count"},
           {"--count 0", "--count"},
           {"--seed -1", "--seed"},
       }) {
    const auto r = seqmix::testing::run_cli("data pathfinder --out " + out + " " + flags);
    EXPECT_EQ(r.code, 1) << flags << ": " << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << flags << ": " << r.output;
    EXPECT_EQ(r.output.find("out of memory"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << flags;
  }
  std::filesystem::remove_all(dir);
}
}  // namespace
