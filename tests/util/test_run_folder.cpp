// A run folder belongs to one run: it is refused without --resume/--overwrite, locked while
// trained, left as it was by a run that fails, checkpointed on SIGINT/SIGTERM; resume never
// shortens or silently re-plans a run; non-finite values never reach a checkpoint; the
// command line checks every value it is given and says what it does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/schedule.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/files.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"
#include "support/cli.h"
#include "support/temp_dir.h"
#include "support/tiny_run.h"
#include "support/gradcheck.h"

using namespace seqmix;
using seqmix::testing::json_lines;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;
namespace fs = std::filesystem;

using seqmix::testing::tiny_config;

namespace {

TEST(RunFolder, NonFiniteGradientNormStopsAndNonFiniteWeightsAreNeverCheckpointed) {
  const std::string dir = seqmix::testing::temp_dir("rf-nonfinite");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  auto c = tiny_config(data);
  c.train.grad_clip = 0;  // the norm is checked even when nothing is clipped
  // Finite gradients whose norm overflows float32: the step stops there.
  train::TrainOptions o;
  o.out_dir = dir + "/norm";
  o.after_backward = [](int64_t step, models::SequenceModel& m) {
    if (step != 3) return;
    for (auto& p : m->parameters())
      if (p.grad().defined()) p.grad().fill_(1e30f);
  };
  try {
    train::train(c, o);
    ADD_FAILURE() << "an overflowing gradient norm went through";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("step 3: the gradient norm is inf"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(train::read_metrics(o.out_dir + "/metrics.jsonl").back()["step"], 2);

  // nonfinite = skip: weights that became NaN stop the run at the next checkpoint, which is
  // not written; the last good one (step 2) stays.
  c.train.nonfinite = "skip";
  train::TrainOptions s;
  s.out_dir = dir + "/skip";
  s.after_backward = [](int64_t step, models::SequenceModel& m) {
    if (step != 3) return;
    torch::NoGradGuard g;
    m->parameters().front().fill_(std::numeric_limits<float>::quiet_NaN());
  };
  try {
    train::train(c, s);
    ADD_FAILURE() << "non-finite weights were checkpointed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is no longer finite"), std::string::npos) << e.what();
  }
  models::SequenceModel m(c.model);
  EXPECT_EQ(train::load_checkpoint(s.out_dir + "/checkpoint.pt", m, nullptr), 2);
  for (const auto& p : m->parameters()) EXPECT_TRUE(at::isfinite(p).all().item<bool>());
}

TEST(RunFolder, ALossSpikeWarnsOnce) {
  train::LossSpikeWatch w;
  for (int64_t i = 1; i <= 30; ++i) EXPECT_EQ(w.check(i, 2.0 + 0.01 * static_cast<double>(i % 3)), "");
  const std::string warning = w.check(31, 11.0);
  EXPECT_NE(warning.find("step 31"), std::string::npos) << warning;
  EXPECT_NE(warning.find("5."), std::string::npos) << warning;
  EXPECT_EQ(w.check(32, 50.0), "");  // once
  train::LossSpikeWatch early;
  EXPECT_EQ(early.check(1, 1.0), "");
  EXPECT_EQ(early.check(2, 100.0), "");  // too few steps to judge
}

TEST(RunFolder, ControlCharactersInPathsAreRefused) {
  EXPECT_THROW(util::check_path_text("runs/a\nb", "--out"), std::invalid_argument);
  EXPECT_THROW(util::check_path_text(std::string("x\x7f"), "--out"), std::invalid_argument);
  EXPECT_NO_THROW(util::check_path_text("runs/ä b'c", "--out"));
  try {
    util::check_path_text("a\tb", "--data");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--data: 'a\\x09b'"), std::string::npos) << e.what();
  }
}

// A signal whose action is the default waits while a file is written whole, then ends the
// process as it would have (test: the child writes "held" after the signal, before the
// guard's end, and dies of SIGINT; the file is whole, its temporary gone).
TEST(RunFolder, ASignalDuringAnAtomicWriteWaitsForTheWholeFile) {
  const std::string dir = seqmix::testing::temp_dir("hold-signals");
  const std::string file = dir + "/f.txt";
  EXPECT_EXIT(
      {
        signal(SIGINT, SIG_DFL);
        {
          const util::HoldStopSignals outer;
          {
            const util::HoldStopSignals inner;  // nested: the outer one restores
            raise(SIGINT);
            util::write_file_atomic(file, "whole");
          }
          std::fprintf(stderr, "held\n");
        }
        std::fprintf(stderr, "not reached\n");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "^held\n$");
  EXPECT_EQ(util::read_file(file), "whole");
  EXPECT_FALSE(std::filesystem::exists(file + ".tmp"));
  // Without a signal the guard changes nothing, and an installed handler stays installed.
  { const util::HoldStopSignals hold; }
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {
}  // namespace
