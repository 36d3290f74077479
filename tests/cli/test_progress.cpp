// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): the progress line
// (include/seqmix/util/progress.h) as `seqmix train` prints it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "seqmix/models/presets.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/util/progress.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using seqmix::util::Progress;
using seqmix::util::ProgressOptions;

// Columns of a terminal line: UTF-8 characters, without the erase-to-end escape "\033[K".
int columns(std::string s) {
  for (size_t at; (at = s.find("\033[K")) != std::string::npos;) s.erase(at, 3);
  int n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

const std::string kLongStatus =
    "loss 1.2345 lr 3.00e-04 and a long tail of status text that no 80-column terminal holds "
    "whole, with a UTF-8 character (\xC3\xA9) at the end \xC3\xA9\xC3\xA9\xC3\xA9";

TEST(Progress, TrainingOutputOnAPipeAndOnANarrowTerminal) {
  const std::string dir = seqmix::testing::temp_dir("progress");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const std::string args = "train --size tiny --max-len 32 --batch-size 4 --max-steps 3 "
                           "--threads 1 --data " + corpus + " --out ";
  const auto piped = seqmix::testing::run_cli(args + dir + "/piped");
  ASSERT_EQ(piped.code, 0) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\033'), std::string::npos) << piped.output;
  EXPECT_NE(piped.output.find("steps/s"), std::string::npos) << piped.output;

  if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  const std::string log = dir + "/tty.log";
  const std::string cmd = "stty cols 40 rows 24; " + seqmix::testing::seqmix_bin() + " " + args +
                          dir + "/tty 2>&1";
  const std::string shell = "script -qec '" + cmd + "' /dev/null > " + log + " 2>&1";
  ASSERT_EQ(std::system(shell.c_str()), 0) << seqmix::testing::read_text(log);
  const std::string out = seqmix::testing::read_text(log);
  // A bar is what follows a carriage return and ends in the erase escape.
  int bars = 0;
  for (size_t at = 0; (at = out.find('\r', at)) != std::string::npos; ++at) {
    const size_t end = out.find("\033[K", at);
    if (end == std::string::npos) continue;
    const std::string bar = out.substr(at + 1, end - at - 1);
    if (bar.find('\r') != std::string::npos || bar.find('\n') != std::string::npos) continue;
    if (bar.rfind("train", 0) != 0) continue;
    ++bars;
    EXPECT_LE(columns(bar), 39) << "'" << bar << "'";
  }
  EXPECT_GE(bars, 1) << out;
  std::filesystem::remove_all(dir);
}
}  // namespace
