// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): run folders
// (include/seqmix/util/run_folder.h) as `seqmix train`, `eval` and `generate` use them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/schedule.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"
#include "support/cli.h"
#include "support/tiny_run.h"
#include "support/gradcheck.h"

using namespace seqmix;
using seqmix::testing::json_lines;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;
namespace fs = std::filesystem;

using seqmix::testing::tiny_config;

namespace {

const char* kTiny =
    "--model weird-net --size tiny --max-len 32 --batch-size 4 --threads 1 "
    "--set train.warmup_steps=1 ";

// Every file of a folder with its size and a hash of its bytes: "nothing changed" is this
// map being equal.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string bytes = read_text(e.path().string());
    m[e.path().filename().string()] =
        std::to_string(bytes.size()) + ":" + std::to_string(std::hash<std::string>{}(bytes));
  }
  return m;
}

// config.toml is the readable copy of the checkpoint's configuration: an edit would be
// ignored by eval and overwritten by --resume, so both refuse it, naming the keys.
TEST(RunFolder, AnEditedConfigTomlIsRefusedNotIgnored) {
  const std::string dir = seqmix::testing::temp_dir("rf-config-edit");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string run = dir + "/run";
  const std::string args = std::string("train ") + kTiny + "--data " + data;
  ASSERT_EQ(run_cli(args + " --max-steps 2 --out " + run).code, 0);
  const std::string original = read_text(run + "/config.toml");
  std::string edited = original;
  const size_t at = edited.find("\nlr = ");
  ASSERT_NE(at, std::string::npos) << original;
  edited.insert(at + 6, "9");  // lr = 9<old value>
  std::ofstream(run + "/config.toml") << edited;
  const auto before = snapshot(run);
  for (const std::string& cmd : {"eval " + run, args + " --out " + run + " --resume --max-steps 3",
                                 "generate " + run + " --max-new-tokens 2"}) {
    const auto r = run_cli(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("config.toml' differs from the run's checkpoint: train.lr (--lr) "
                            "= 9"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(snapshot(run), before) << cmd;
  }
  std::ofstream(run + "/config.toml") << "this is not [toml";
  auto r = run_cli("eval " + run);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("not valid TOML at line 1"), std::string::npos) << r.output;
  std::ofstream(run + "/config.toml") << original;  // put back: all is well again
  EXPECT_EQ(run_cli("eval " + run).code, 0);
  fs::remove(run + "/config.toml");  // removed: the checkpoint is the configuration
  EXPECT_EQ(run_cli("eval " + run).code, 0);
  r = run_cli(args + " --out " + run + " --resume --max-steps 3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(run + "/config.toml").find("max_steps = 3") != std::string::npos, true);
}

// What a hostile sweep found: each refusal names what is wrong.
TEST(RunFolder, SweepFindingsAreRefusedNamingTheCause) {
  const std::string dir = seqmix::testing::temp_dir("rf-sweep");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--max-steps 2 --data " + data;
  // Optimizer values float32 cannot hold: inf or 0 in the first step, NaN losses after.
  for (const auto& [set, message] : std::vector<std::pair<std::string, std::string>>{
           {"train.lr=1e300", "train.lr (--lr): must be at most"},
           {"train.grad_clip=1e300", "train.grad_clip: must be at most"},
           {"train.weight_decay=1e300", "train.weight_decay: must be at most"},
           {"train.eps=1e-50", "train.eps: must be at least"}}) {
    const auto r = run_cli(args + " --out " + dir + "/o --set " + set);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir + "/o"));
  }
  // A checkpoint.pt that is not a file: said so, not "has no checkpoint.pt".
  const std::string run = dir + "/run";
  ASSERT_EQ(run_cli(args + " --out " + run).code, 0);
  fs::rename(run + "/checkpoint.pt", dir + "/kept.pt");
  fs::create_directory(run + "/checkpoint.pt");
  auto r = run_cli("eval " + run);
  EXPECT_NE(r.output.find("its checkpoint.pt is a folder, not a regular file"),
            std::string::npos)
      << r.output;
  fs::remove(run + "/checkpoint.pt");
  ASSERT_EQ(mkfifo((run + "/checkpoint.pt").c_str(), 0600), 0);
  r = run_cli("eval " + run);
  EXPECT_NE(r.output.find("its checkpoint.pt is a FIFO"), std::string::npos) << r.output;
  // A corpus file beyond PATH_MAX is an error, never silently left out of the data.
  const std::string deep = dir + "/deep";
  fs::create_directories(deep);
  std::ofstream(deep + "/a.txt") << std::string(20000, 'x');
  const std::string component(100, 'd');
  int fd = open(deep.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 45; ++i) {  // 45 x 101 bytes: past PATH_MAX (4096), one level at a time
    ASSERT_EQ(mkdirat(fd, component.c_str(), 0755), 0);
    const int next = openat(fd, component.c_str(), O_RDONLY | O_DIRECTORY);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  const int file = openat(fd, "b.txt", O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(file, 0);
  ASSERT_EQ(write(file, "hidden\n", 7), 7);
  close(file);
  close(fd);
  r = run_cli(std::string("train ") + kTiny + "--max-steps 2 --data " + deep + " --out " + dir +
              "/o");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(r.output.find("cannot read") != std::string::npos ||
              r.output.find("cannot list folder") != std::string::npos)
      << r.output;
  EXPECT_EQ(std::system(("rm -rf '" + deep + "'").c_str()), 0);
}

TEST(RunFolder, AnExistingRunIsRefusedWithoutResumeOrOverwrite) {
  const std::string dir = seqmix::testing::temp_dir("rf-refuse");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--max-steps 3 --data " + data;
  ASSERT_EQ(run_cli(args + " --out " + dir + "/run").code, 0);
  const auto before = snapshot(dir + "/run");
  // Another model into the same folder: refused, naming the folder and both ways out.
  auto r = run_cli("train --model transformer --size tiny --max-len 32 --batch-size 4 "
                   "--threads 1 --max-steps 3 --data " + data + " --out " + dir + "/run");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(dir + "/run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), before);
  r = run_cli(args + " --out " + dir + "/run --resume --overwrite");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), before);
  // --overwrite replaces it.
  r = run_cli("train --model transformer --size tiny --max-len 32 --batch-size 4 --threads 1 "
              "--max-steps 2 --data " + data + " --out " + dir + "/run --overwrite");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(train::read_checkpoint_config(dir + "/run/checkpoint.pt").model.preset, "transformer");
  EXPECT_NE(read_text(dir + "/run/config.toml").find("transformer"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/run/.metrics.jsonl.overwrite"));
  for (const auto& l : train::read_metrics(dir + "/run/metrics.jsonl"))
    EXPECT_LE(l["step"].get<int64_t>(), 2) << l.dump();  // none of the old run's lines
}

TEST(RunFolder, AFailedRunLeavesTheRunThatWasThereAndNoEmptyFolder) {
  const std::string dir = seqmix::testing::temp_dir("rf-fail");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--data " + data;
  ASSERT_EQ(run_cli(args + " --max-steps 3 --out " + dir + "/run").code, 0);
  const auto before = snapshot(dir + "/run");
  // Diverges at once, before its first checkpoint: the old run is untouched.
  auto r = run_cli(args + " --max-steps 4 --set train.lr=1e30 --set train.grad_clip=0 --out " +
                   dir + "/run --overwrite");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), before);
  // Its data gone on resume: nothing rewritten either.
  fs::rename(data, data + ".away");
  r = run_cli(std::string("train --out ") + dir + "/run --resume --max-steps 9");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), before);
  fs::rename(data + ".away", data);
  // A new run that fails leaves no folder behind; one into an existing folder leaves it empty.
  r = run_cli(args + " --max-steps 4 --set train.lr=1e30 --set train.grad_clip=0 --out " + dir +
              "/new/deeper");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/new/deeper"));
  fs::create_directories(dir + "/mine");
  std::ofstream(dir + "/mine/notes.txt") << "keep me";
  r = run_cli(args + " --max-steps 4 --set train.lr=1e30 --set train.grad_clip=0 --out " + dir +
              "/mine");
  EXPECT_EQ(r.code, 1) << r.output;
  ASSERT_EQ(snapshot(dir + "/mine").size(), 1u);
  EXPECT_EQ(read_text(dir + "/mine/notes.txt"), "keep me");
}

// Starts `seqmix <args>` in the background with default signal dispositions (a shell's
// background job would ignore SIGINT), output to `log`.
pid_t spawn(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " + seqmix::testing::seqmix_bin() + " " + args).c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits until the run has logged `lines` training lines (or 60 s).
void wait_for_steps(const std::string& metrics, size_t lines) {
  for (int i = 0; i < 600; ++i) {
    size_t n = 0;
    std::ifstream in(metrics);
    for (std::string s; std::getline(in, s);) n += s.find("\"split\":\"train\"") != std::string::npos;
    if (n >= lines) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TEST(RunFolder, LockedWhileTrained) {
  const std::string dir = seqmix::testing::temp_dir("rf-lock");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const pid_t pid = spawn(std::string("train ") + kTiny + "--max-steps 1000000 --data " + data +
                              " --out " + dir + "/run",
                          dir + "/log");
  wait_for_steps(dir + "/run/metrics.jsonl", 3);
  for (const char* how : {"--resume", "--overwrite", ""}) {
    auto r = run_cli(std::string("train ") + kTiny + "--max-steps 5 --data " + data + " --out " +
                     dir + "/run " + how);
    EXPECT_EQ(r.code, 1) << how << r.output;
    EXPECT_NE(r.output.find("in use by another seqmix process"), std::string::npos) << r.output;
  }
  auto r = run_cli("compare --out " + dir + "/run --data " + data + " --run a=weird-net");
  EXPECT_NE(r.code, 0);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // The kernel drops the lock with the process: the run resumes.
  r = run_cli(std::string("train ") + kTiny + "--max-steps 2 --data " + data + " --out " + dir +
              "/other");
  EXPECT_EQ(r.code, 0) << r.output;
  util::FolderLock lock(dir + "/other", "run folder");
  EXPECT_THROW(util::FolderLock(dir + "/other", "run folder"), std::runtime_error);
}

TEST(RunFolder, ResumeNeverShortensAndAFinishedRunIsLeftAlone) {
  const std::string dir = seqmix::testing::temp_dir("rf-resume");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--data " + data + " --out " + dir +
                           "/run";
  ASSERT_EQ(run_cli(args + " --max-steps 6").code, 0);
  const auto finished = snapshot(dir + "/run");
  // Shorter: refused, nothing rewritten (the checkpoint used to become "step 3").
  auto r = run_cli(std::string("train --out ") + dir + "/run --resume --max-steps 3");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("train.max_steps (--max-steps) 3 is below"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), finished);
  // The same length: a finished run trains nothing and writes nothing.
  r = run_cli(std::string("train --out ") + dir + "/run --resume");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("finished"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(dir + "/run"), finished);
  const auto rows = json_lines(r.output);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back()["steps"], 6);
  EXPECT_GT(rows.back()["bpc"].get<double>(), 0);
  // Longer: the schedule keeps its horizon (6), and says so.
  r = run_cli(std::string("train --out ") + dir + "/run --resume --max-steps 9");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("horizon stays at 6 steps"), std::string::npos) << r.output;
  const auto config = train::read_checkpoint_config(dir + "/run/checkpoint.pt");
  EXPECT_EQ(config.train.decay_steps, 6);
  const double floor = config.train.lr * config.train.min_lr_ratio;
  for (const auto& l : train::read_metrics(dir + "/run/metrics.jsonl"))
    if (l.value("split", "") == "train" && l["step"].get<int64_t>() > 6)
      EXPECT_DOUBLE_EQ(l["lr"].get<double>(), floor) << l.dump();
  // Stretching it is explicit, and printed.
  r = run_cli(std::string("train --out ") + dir + "/run --resume --max-steps 12 "
              "--set train.decay_steps=12");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("horizon changed from 6 to 12 steps"), std::string::npos) << r.output;
}

TEST(RunFolder, MetricsCarryTimeAndOneSplitVocabulary) {
  const std::string dir = seqmix::testing::temp_dir("rf-metrics");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  auto r = run_cli(std::string("train ") + kTiny + "--max-steps 4 --data " + data +
                   " --set train.eval_interval=2 --out " + dir + "/lm");
  ASSERT_EQ(r.code, 0) << r.output;
  double last_time = 0;
  for (const auto& l : train::read_metrics(dir + "/lm/metrics.jsonl")) {
    ASSERT_TRUE(l.contains("time_s")) << l.dump();
    EXPECT_GE(l["time_s"].get<double>(), last_time);
    last_time = l["time_s"].get<double>();
    EXPECT_TRUE(l["split"] == "train" || l["split"] == "valid") << l.dump();
  }
  // A classifier: no perplexity; its training-split evaluation is not a training line.
  r = run_cli("train --task listops --model weird-net-a --threads 1 --max-steps 2 --set "
              "data.train_examples=16 --set data.valid_examples=8 --set data.test_examples=8 "
              "--set model.n_layers=1 --set model.d_model=16 --set model.d_ff=32 --set "
              "model.n_heads=2 --set train.log_interval=1 --batch-size 4 --out " + dir + "/task");
  ASSERT_EQ(r.code, 0) << r.output;
  std::map<std::string, int> splits;
  for (const auto& l : train::read_metrics(dir + "/task/metrics.jsonl")) {
    EXPECT_FALSE(l.contains("perplexity")) << l.dump();
    ++splits[l.value("split", "")];
    if (l["split"] == "train") EXPECT_FALSE(l.contains("final")) << l.dump();
  }
  EXPECT_EQ(splits["train"], 2);
  EXPECT_EQ(splits["train_eval"], 1);
  EXPECT_EQ(splits["test"], 1);
  EXPECT_GE(splits["valid"], 1);
}

TEST(RunFolder, FlagValuesAreCheckedLikeTheKeysTheySet) {
  const std::string dir = seqmix::testing::temp_dir("rf-flags");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string base = std::string("train --size tiny --data ") + data + " --out " + dir + "/run ";
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--lr", "-1"},
           {"--lr", "nan"},
           {"--lr", "inf"},
           {"--batch-size", "-1"},
           {"--batch-size", "0"},
           {"--max-len", "-1"},
           {"--max-steps", "-5"},
           {"--seed", "-1"},
           {"--threads", "-1"},
           {"--threads", "100000"},
           {"--batch-size", "1e9"},  // read as 10^9, then refused against physical memory
           {"--max-len", "1e9"},
           {"--max-steps", "2.5"},
           {"--seed", "x"}}) {
    const auto r = run_cli(base + flag + " " + value);
    EXPECT_EQ(r.code, 1) << flag << " " << value << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << " " << value << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir + "/run")) << flag << " " << value;
  }
  // The run-time commands too.
  ASSERT_EQ(run_cli(std::string("train ") + kTiny + "--max-steps 2 --data " + data + " --out " +
                    dir + "/ok")
                .code,
            0);
  for (const std::string& bad :
       {"eval " + dir + "/ok --max-bytes -1", "eval " + dir + "/ok --batch-size 0",
        "eval " + dir + "/ok --threads -1", "generate " + dir + "/ok --threads 100000"}) {
    const auto r = run_cli(bad);
    EXPECT_EQ(r.code, 1) << bad << ": " << r.output;
    EXPECT_EQ(r.output.find("\"loss\""), std::string::npos) << r.output;
  }
}

TEST(RunFolder, GenerateRejectsOptionsBeforePrintingAnything) {
  const std::string dir = seqmix::testing::temp_dir("rf-generate");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  ASSERT_EQ(run_cli(std::string("train ") + kTiny + "--max-steps 2 --data " + data + " --out " +
                    dir + "/ok")
                .code,
            0);
  for (const std::string& opt : {"--top-p 0", "--top-p 1.5", "--temperature -1",
                                 "--temperature nan", "--top-k -3", "--seed -1"}) {
    // stdout only (stderr dropped): the prompt must not appear before the error.
    const auto r =
        run_cli("generate " + dir + "/ok --prompt PROMPTTEXT " + opt + " 2>/dev/null; exit $?");
    EXPECT_EQ(r.code, 1) << opt;
    EXPECT_EQ(r.output, "") << opt;
  }
}

TEST(RunFolder, TokenizerTrainDoesNotOverwriteWithoutBeingAsked) {
  const std::string dir = seqmix::testing::temp_dir("rf-tok");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  std::ofstream(dir + "/t.model") << "precious";
  auto r = run_cli("tokenizer train --data " + data + " --vocab-size 300 --out " + dir + "/t.model");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(read_text(dir + "/t.model"), "precious");
}

TEST(Cli, VersionUsageAndDefaultsInHelp) {
  auto r = run_cli("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.output.rfind("seqmix ", 0), 0u) << r.output;
  r = run_cli("");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Subcommands:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train"), std::string::npos) << r.output;
  r = run_cli("generate --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("0.95"), std::string::npos) << r.output;  // --top-p's default
  EXPECT_NE(r.output.find("256"), std::string::npos) << r.output;   // --max-new-tokens
}

TEST(Cli, WarmupLongerThanTheRunWarns) {
  const std::string dir = seqmix::testing::temp_dir("rf-warmup");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const auto r = run_cli("train --model weird-net --size tiny --max-len 32 --batch-size 4 "
                         "--threads 1 --max-steps 3 --set train.warmup_steps=10 --data " + data +
                         " --out " + dir + "/run");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("train.warmup_steps (10)"), std::string::npos) << r.output;
}

TEST(Cli, EmptyAndOutOfRangeValuesAreErrorsNamingTheOption) {
  const std::string dir = seqmix::testing::temp_dir("rf-values");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  ASSERT_EQ(run_cli(std::string("train ") + kTiny + "--max-steps 1 --data " + data + " --out " +
                    dir + "/ok")
                .code,
            0);
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {"train --size tiny --lr '' --out " + dir + "/x", "--lr"},
           {"train --size tiny --data '' --out " + dir + "/x", "--data"},
           {"train --size tiny --tokenizer '' --out " + dir + "/x", "--tokenizer"},
           {"train --size tiny --task '' --out " + dir + "/x", "--task"},
           {"train --task listops --data " + data + " --out " + dir + "/x", "--data"},
           {"eval " + dir + "/ok --max-bytes 9223372036854775808", "--max-tokens"},
           {"eval " + dir + "/ok --threads ''", "--threads"},
           {"generate " + dir + "/ok --temperature ''", "--temperature"},
           {"generate " + dir + "/ok --max-new-tokens 9223372036854775807", "--max-new-tokens"},
           {"generate " + dir + "/ok --max-new-tokens -1", "--max-new-tokens"},
           {"data pathfinder --count 0 --out " + dir + "/pf", "--count"},
           {"data pathfinder --seed -1 --out " + dir + "/pf", "--seed"},
           {"plot " + dir + "/ok --metric ''", "--metric"},
           {"bench ops --L 9223372036854775808", "--L"}}) {
    const auto r = run_cli(args);
    EXPECT_NE(r.code, 0) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir + "/x")) << args;
    EXPECT_FALSE(fs::exists(dir + "/pf")) << args;
  }
}

TEST(Cli, OutputsNeverLandInAnotherRunOrOverAUsersFiles) {
  const std::string dir = seqmix::testing::temp_dir("rf-outputs");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  ASSERT_EQ(run_cli(std::string("train ") + kTiny + "--max-steps 1 --data " + data + " --out " +
                    dir + "/run")
                .code,
            0);
  const auto run = snapshot(dir + "/run");
  const std::string listops = " --train 4 --valid 2 --test 2 --min-length 10 --max-length 100";
  for (const std::string& args :
       {"data listops --out " + dir + "/run" + listops, "data pathfinder --count 2 --out " + dir + "/run",
        std::string("compare ") + kTiny + "--max-steps 1 --data " + data + " --run a=weird-net --out " +
            dir + "/run"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("training run's folder"), std::string::npos) << r.output;
  }
  EXPECT_EQ(snapshot(dir + "/run"), run);
  // A folder of the user's own is not a place to train in; files of the user's own are not
  // replaced by data exports without --overwrite.
  fs::create_directories(dir + "/mine");
  std::ofstream(dir + "/mine/listops_train.tsv") << "keep";
  std::ofstream(dir + "/mine/labels.tsv") << "keep";
  auto r = run_cli(std::string("train ") + kTiny + "--max-steps 1 --data " + data + " --out " +
                   dir + "/mine");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("not empty"), std::string::npos) << r.output;
  r = run_cli("data listops --out " + dir + "/mine" + listops);
  EXPECT_EQ(r.code, 1) << r.output;
  r = run_cli("data pathfinder --count 2 --out " + dir + "/mine");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(read_text(dir + "/mine/listops_train.tsv"), "keep");
  EXPECT_EQ(read_text(dir + "/mine/labels.tsv"), "keep");
  r = run_cli("data listops --overwrite --out " + dir + "/mine" + listops);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(read_text(dir + "/mine/listops_train.tsv"), "keep");
}

TEST(RunFolder, ZeroStepsCheckpointsAndARunThatNeverCheckpointedIsReplaced) {
  const std::string dir = seqmix::testing::temp_dir("rf-zero");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--data " + data + " --out " + dir + "/run";
  auto r = run_cli(args + " --max-steps 0");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoint.pt"));
  // What a run killed before its first checkpoint leaves: no checkpoint, only its files.
  fs::remove(dir + "/run/checkpoint.pt");
  r = run_cli(args + " --max-steps 2 --resume");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint"), std::string::npos) << r.output;
  r = run_cli(args + " --max-steps 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(train::read_checkpoint_config(dir + "/run/checkpoint.pt").train.max_steps, 2);
  EXPECT_FALSE(fs::exists(dir + "/run/.metrics.jsonl.overwrite"));
}

TEST(RunFolder, WeightsThatGiveNonFiniteOutputsFailEvaluation) {
  const std::string dir = seqmix::testing::temp_dir("rf-nanout");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  auto c = tiny_config(data);
  models::SequenceModel m(c.model);
  {
    torch::NoGradGuard g;
    for (auto& p : m->parameters()) p.fill_(1e30f);  // finite, but the forward pass overflows
  }
  fs::create_directories(dir + "/big");
  train::save_checkpoint(dir + "/big/checkpoint.pt", m, nullptr, c, 1);
  auto r = run_cli("eval " + dir + "/big");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("not finite"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\"loss\""), std::string::npos) << r.output;
}
TEST(RunFolder, SigintCheckpointsTheStepAndSaysHowToResume) {
  const std::string dir = seqmix::testing::temp_dir("rf-sigint");
  const std::string data = seqmix::testing::tiny_corpus(dir);
  const std::string args = std::string("train ") + kTiny + "--max-steps 1000000 " +
                           "--set train.checkpoint_interval=0 --data " + data + " --out " + dir +
                           "/run";
  pid_t pid = spawn(args, dir + "/log");
  wait_for_steps(dir + "/run/metrics.jsonl", 5);
  ASSERT_FALSE(fs::exists(dir + "/run/checkpoint.pt"));  // none yet: interval 0
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << read_text(dir + "/log");
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  const std::string log = read_text(dir + "/log");
  EXPECT_NE(log.find("interrupted by SIGINT after step"), std::string::npos) << log;
  EXPECT_NE(log.find("seqmix train --out " + dir + "/run --resume"), std::string::npos) << log;
  // The checkpoint holds the step the last metrics line names.
  const auto lines = train::read_metrics(dir + "/run/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["event"], "interrupted");
  models::SequenceModel m(train::read_checkpoint_config(dir + "/run/checkpoint.pt").model);
  const int64_t step = train::load_checkpoint(dir + "/run/checkpoint.pt", m, nullptr);
  EXPECT_EQ(lines.back()["step"].get<int64_t>(), step);
  EXPECT_GE(step, 5);

  // SIGTERM twice: the second ends the process at once, by the signal; the checkpoint that
  // was there stays readable.
  pid = spawn(args + " --resume", dir + "/log2");
  wait_for_steps(dir + "/run/metrics.jsonl", static_cast<size_t>(step) + 3);
  kill(pid, SIGINT);
  kill(pid, SIGTERM);
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
  EXPECT_NO_THROW(train::read_checkpoint_config(dir + "/run/checkpoint.pt"));
}

// The final evaluation scores the whole held-out split (minutes on a large corpus): a signal
// stops it between batches and says so; the last step's checkpoint is there for --resume.
TEST(RunFolder, SigintDuringTheFinalEvaluationStopsItAndKeepsTheCheckpoint) {
  const std::string dir = seqmix::testing::temp_dir("rf-sigint-eval");
  {
    // 12 MB of text: a held-out split (the last 10%) that takes the tiny model many seconds.
    std::ofstream out(dir + "/big.txt");
    std::mt19937 gen(3);
    std::string line;
    for (int i = 0; i < 200000; ++i) {
      line.assign(59, 'a');
      for (auto& c : line) c = static_cast<char>('a' + gen() % 26);
      out << line << '\n';
    }
  }
  const std::string args = std::string("train ") + kTiny + "--max-steps 2 --data " + dir +
                           "/big.txt --out " + dir + "/run";
  const pid_t pid = spawn(args, dir + "/log");
  for (int i = 0; i < 1200 && read_text(dir + "/log").find("final evaluation:") ==
                                  std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(read_text(dir + "/log").find("final evaluation:"), std::string::npos)
      << read_text(dir + "/log");
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string log = read_text(dir + "/log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << log;
  EXPECT_NE(log.find("interrupted by SIGINT after step 2 of 2"), std::string::npos) << log;
  const auto lines = train::read_metrics(dir + "/run/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["event"], "interrupted");
  for (const auto& l : lines) EXPECT_FALSE(l.contains("final") && l["final"] == true) << l;
  // The checkpoint of step 2 was written before the evaluation: --resume evaluates it.
  models::SequenceModel m(train::read_checkpoint_config(dir + "/run/checkpoint.pt").model);
  EXPECT_EQ(train::load_checkpoint(dir + "/run/checkpoint.pt", m, nullptr), 2);
}

}  // namespace
