// Hostile input, one test suite per class of fault: parsing bounds, output integrity,
// special files, data fingerprints, messages. Each case is something a user (or a crafted
// file) did that once crashed seqmix, lost output with exit 0, replaced what it should not
// have, or said something wrong; the launcher's cases live in tests/dist, the gradients' and
// the Python package's in tests/python/test_hostile.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "seqmix/train/configuration/config.h"
#include "support/cli.h"
#include "support/errors.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using seqmix::testing::error_of;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;
using seqmix::testing::seqmix_bin;
using seqmix::testing::temp_dir;

struct Shell {
  int code;            // exit status, 128 + N when killed by signal N (as a shell says)
  std::string output;  // what the command line sends to the pipe
};

// Runs `line` with /bin/sh, where "SEQMIX" stands for the binary: redirections are the test's.
Shell sh(std::string line) {
  for (size_t at; (at = line.find("SEQMIX")) != std::string::npos;)
    line.replace(at, 6, seqmix_bin());
  int status = 0;
  const std::string out = seqmix::testing::read_command("exec 2>&1; " + line, status);
  if (status == -1) return {-1, out};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A tiny byte-level run trained on `dir`/c.txt, shared by the tests of one suite.
std::string tiny_run(const std::string& dir, const std::string& name = "run") {
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const auto r = run_cli("train --data " + corpus + " --size tiny --max-len 32 --batch-size 4 "
                         "--max-steps 2 --threads 1 --out " + dir + "/" + name);
  EXPECT_EQ(r.code, 0) << r.output;
  return dir + "/" + name;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// ---------------------------------------------------------------------------------------
// Parsing bounds: a crafted TOML file is an error, never a stack overflow (exit 139).

TEST(ParsingBounds, DeeplyNestedTomlIsRefusedBeforeParsing) {
  const std::string dir = temp_dir("hostile-toml");
  // 50,000 levels of a table header, of arrays, of inline tables and of dotted keys.
  const std::map<std::string, std::string> files = {
      {"header", "[" + repeat("a.", 50000) + "a]\n"},
      {"arrays", "x = " + repeat("[", 50000) + repeat("]", 50000) + "\n"},
      {"inline", "x = " + repeat("{a=", 50000) + "1" + repeat("}", 50000) + "\n"},
      {"dotted", repeat("a.", 50000) + "a = 1\n"},
  };
  for (const auto& [name, text] : files) {
    std::ofstream(dir + "/" + name + ".toml") << text;
    const auto r = run_cli("train --config " + dir + "/" + name + ".toml --dump-config");
    EXPECT_EQ(r.code, 1) << name << ": " << r.output.substr(0, 300);
    EXPECT_TRUE(contains(r.output, "nests at most 32")) << name << ": " << r.output.substr(0, 300);
    // The library entry point that checkpoints, plot and Python share.
    const std::string e =
        error_of([&] { seqmix::train::RunConfig::from_toml(text, "crafted"); });
    EXPECT_TRUE(contains(e, "crafted: TOML nested")) << name << ": " << e.substr(0, 300);
  }
  // An override is parsed as TOML too.
  const auto r = run_cli("train --dump-config --set 'model.mixers=" + repeat("[", 20000) + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "nests at most 32")) << r.output.substr(0, 300);
  // Real configurations pass: every key of the resolved one, at depth 2.
  const std::string real = run_cli("train --dump-config --size tiny").output;
  EXPECT_NO_THROW(seqmix::train::RunConfig::from_toml(real, "dump"));
  // Brackets and dots inside strings and comments are not nesting.
  EXPECT_EQ(error_of([] {
              seqmix::train::check_toml_text("# [[[[" + repeat("[", 100) + "\n" +
                                             "x = '" + repeat("[a.", 100) + "'\n" +
                                             "y = \"\"\"" + repeat("{", 100) + "\"\"\"\n",
                                             "strings");
            }),
            "(no error)");
}

TEST(ParsingBounds, OversizedTomlAndRunConfigsAreRefused) {
  const std::string dir = temp_dir("hostile-toml-size");
  const std::string big = "# " + std::string(2 << 20, 'x') + "\n";
  EXPECT_TRUE(contains(error_of([&] { seqmix::train::RunConfig::from_toml(big, "big"); }),
                       "at most 1 MiB"));
  // plot reads a run's config.toml: a crafted one is reported and left out, not a crash.
  const std::string run = tiny_run(dir);
  std::ofstream(run + "/config.toml", std::ios::trunc) << "[" << repeat("a.", 50000) << "a]\n";
  const auto r = run_cli("plot " + run + " --out " + dir + "/p.svg");
  EXPECT_NE(r.code, 139) << r.output;
  EXPECT_FALSE(contains(r.output, "Segmentation")) << r.output;
}

TEST(ParsingBounds, OverrideValuesWithLineBreaksAreRefused) {
  // "v = " + value is parsed as a document: a line break once cut the value short, exit 0.
  const auto r = run_cli("train --dump-config --set \"$(printf 'train.lr=0.1\\nx=1')\"");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "line break")) << r.output;
}

// ---------------------------------------------------------------------------------------
// Output integrity: what goes to stdout arrives whole, or the command fails.

TEST(OutputIntegrity, AFailedWriteToStdoutFailsTheCommand) {
  const std::string dir = temp_dir("hostile-stdout");
  const std::string run = tiny_run(dir);
  for (const std::string& cmd :
       {std::string("train --dump-config --size tiny"), "generate " + run + " --max-new-tokens 5",
        "eval " + run, std::string("info")}) {
    auto r = sh("SEQMIX " + cmd + " >/dev/full");
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "could not write standard output")) << cmd << ": " << r.output;
    r = sh("SEQMIX " + cmd + " >&-");  // closed
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "could not write standard output")) << cmd << ": " << r.output;
  }
  // train's final JSON line: the run is saved, the missing line is still an error.
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const auto r = sh("SEQMIX train --data " + corpus + " --size tiny --max-len 32 --batch-size 4 "
                    "--max-steps 1 --threads 1 --out " + dir + "/full >/dev/full");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/full/checkpoint.pt"));
}

TEST(OutputIntegrity, AClosedPipeEndsQuietlyWithANonZeroStatus) {
  const std::string dir = temp_dir("hostile-pipe");
  const std::string run = tiny_run(dir);
  // The reader goes away after one byte: SIGPIPE, 141, and no error message of seqmix's.
  const auto r = sh("bash -c 'set -o pipefail; SEQMIX generate " + run +
                    " --max-new-tokens 1000000 2>&1 | head -c 1 >/dev/null'");
  EXPECT_EQ(r.code, 141) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(OutputIntegrity, GenerateWritesNulBytes) {
  // A byte model trained on NUL bytes generates NUL bytes; fputs once stopped at them.
  const std::string dir = temp_dir("hostile-nul");
  std::ofstream(dir + "/zeros.bin", std::ios::binary) << std::string(20000, '\0');
  auto r = run_cli("train --data " + dir + "/zeros.bin --size tiny --max-len 32 --batch-size 8 "
                   "--max-steps 30 --lr 0.01 --threads 1 --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto g = sh("SEQMIX generate " + dir + "/run --prompt x --temperature 0 "
                    "--max-new-tokens 40 2>/dev/null >" + dir + "/out.bin");
  ASSERT_EQ(g.code, 0) << g.output;
  const std::string out = read_text(dir + "/out.bin");
  EXPECT_EQ(out.size(), 1u + 40u + 1u);  // prompt, the new bytes, a newline
  EXPECT_GT(std::count(out.begin(), out.end(), '\0'), 0);
}

// ---------------------------------------------------------------------------------------
// Special files: an output replaces a regular file or nothing.

TEST(SpecialFiles, OutputsNeverReplaceFifosDevicesOrLinks) {
  const std::string dir = temp_dir("hostile-special");
  const std::string run = tiny_run(dir);
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto is_fifo = [&] {
    struct stat st {};
    return lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  };
  auto r = run_cli("export " + run + " --out " + fifo + " --overwrite");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "is a FIFO")) << r.output;
  EXPECT_TRUE(is_fifo());
  // A dangling link, with and without --overwrite; a link to a file.
  fs::create_symlink(dir + "/nowhere.pt", dir + "/dangling.pt");
  for (const std::string flag : {"", " --overwrite"}) {
    r = run_cli("export " + run + " --out " + dir + "/dangling.pt" + flag);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "symbolic link")) << r.output;
    EXPECT_TRUE(fs::is_symlink(dir + "/dangling.pt"));
    EXPECT_FALSE(fs::exists(dir + "/nowhere.pt"));
  }
  // plot writes its picture without a flag: a link there stays a link.
  std::ofstream(dir + "/target.svg") << "mine";
  fs::create_symlink(dir + "/target.svg", dir + "/link.svg");
  r = run_cli("plot " + run + " --out " + dir + "/link.svg");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir + "/link.svg"));
  EXPECT_EQ(read_text(dir + "/target.svg"), "mine");
  r = run_cli("plot " + run + " --out " + fifo);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(is_fifo());
}

TEST(SpecialFiles, ARunFolderWhoseFilesAreNotRegularIsRefusedBeforeTraining) {
  const std::string dir = temp_dir("hostile-runfiles");
  const std::string run = tiny_run(dir);
  fs::remove(run + "/metrics.jsonl");
  fs::create_symlink(dir + "/elsewhere.jsonl", run + "/metrics.jsonl");
  // 10^6 steps: refused at once, or this would run for hours.
  const auto r = run_cli("train --data " + dir + "/c.txt --size tiny --max-len 32 --max-steps "
                         "1000000 --overwrite --out " + run);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "metrics.jsonl' is a symbolic link")) << r.output;
  EXPECT_TRUE(fs::is_symlink(run + "/metrics.jsonl"));
  // export writes nowhere in a run's folder.
  const auto e = run_cli("export " + run + " --out " + run + "/copy.pt");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "in a training run's folder")) << e.output;
  EXPECT_FALSE(fs::exists(run + "/copy.pt"));
}

TEST(SpecialFiles, TokenizerTrainNeverWritesIntoARunFolder) {
  const std::string dir = temp_dir("hostile-tok");
  const std::string run = tiny_run(dir);
  const std::string corpus = dir + "/c.txt";
  std::ofstream(run + "/tokenizer.model") << "the run's own";
  const auto r = run_cli("tokenizer train --data " + corpus + " --vocab-size 300 --out " + run +
                         "/tokenizer.model --overwrite");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "training run's folder")) << r.output;
  EXPECT_EQ(read_text(run + "/tokenizer.model"), "the run's own");
  const std::string fifo = dir + "/tok.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto f = run_cli("tokenizer train --data " + corpus + " --vocab-size 300 --out " + fifo +
                         " --overwrite");
  EXPECT_EQ(f.code, 1) << f.output;
  EXPECT_TRUE(contains(f.output, "is a FIFO")) << f.output;
}

// ---------------------------------------------------------------------------------------
// Data fingerprints: a resume sees the data it started on, or says what changed.

TEST(DataFingerprint, ResumeOnChangedDataIsRefusedNamingTheChange) {
  const std::string dir = temp_dir("hostile-data");
  const std::string run = tiny_run(dir);
  auto r = run_cli("train --out " + run + " --resume --max-steps 3");
  ASSERT_EQ(r.code, 0) << r.output;  // the same data: resumes
  std::ofstream(dir + "/c.txt", std::ios::app) << "a line appended after the run started\n";
  r = run_cli("train --out " + run + " --resume --max-steps 4");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "the data differs")) << r.output;
  // Both sizes, the checkpoint's and the data's now.
  const auto sizes = r.output.find(" held-out bytes (hash ");
  ASSERT_NE(sizes, std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" held-out bytes (hash ", sizes + 1), std::string::npos) << r.output;
  EXPECT_TRUE(contains(r.output, "--allow-data-change")) << r.output;
  r = run_cli("train --out " + run + " --resume --max-steps 4 --allow-data-change");
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_cli("train --out " + dir + "/other --data " + dir + "/c.txt --allow-data-change");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--resume only")) << r.output;
}

// ---------------------------------------------------------------------------------------
// Signals: a hangup (a closed terminal, a dropped SSH session) loses no work.

TEST(Signals, HangupCheckpointsAsSigtermDoes) {
  const std::string dir = temp_dir("hostile-hup");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const std::string out = dir + "/run";
  const auto r = sh("SEQMIX train --data " + corpus + " --size tiny --max-len 32 --batch-size 4 "
                    "--max-steps 1000000 --threads 1 --set train.log_interval=1 --out " + out +
                    " & pid=$!; n=0; until grep -q '\"train\"' " + out +
                    "/metrics.jsonl 2>/dev/null || [ $n -gt 600 ]; do sleep 0.1; n=$((n+1)); "
                    "done; kill -HUP $pid; wait $pid");
  EXPECT_EQ(r.code, 128 + SIGHUP) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted by SIGHUP")) << r.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoint.pt"));
}

// A SIGTERM while a large corpus is encoded stops the encoding between pieces: the run
// folder is never made (it used to wait until the whole corpus was encoded).
TEST(Signals, TermWhileLoadingTheDataStopsItAndWritesNothing) {
  const std::string dir = temp_dir("hostile-loading");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  ASSERT_EQ(run_cli("tokenizer train --data " + corpus + " --vocab-size 300 --out " + dir +
                    "/t.model").code, 0);
  {
    // 40 MB of varied lines: several seconds of SentencePiece encoding on one core.
    std::ofstream big(dir + "/big.txt");
    for (int64_t i = 0; i < 400000; ++i)
      big << "line " << i << " of the quick brown fox, " << (i * 7919) % 100003
          << " jumps over the lazy dog again\n";
  }
  const std::string out = dir + "/run";
  const auto r = sh("SEQMIX train --data " + dir + "/big.txt --tokenizer " + dir +
                    "/t.model --size tiny --max-len 32 --max-steps 1 --threads 1 --out " + out +
                    " & pid=$!; sleep 1; kill -TERM $pid; wait $pid");
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.output;
  EXPECT_TRUE(contains(r.output, "interrupted by SIGTERM while loading the data; nothing was "
                                 "written")) << r.output;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Messages: each says what is so, and which command takes what was given.

TEST(Messages, WrongKindsOfFileAreNamedWithTheCommandThatTakesThem) {
  const std::string dir = temp_dir("hostile-kinds");
  const std::string run = tiny_run(dir);
  ASSERT_EQ(run_cli("export " + run + " --out " + dir + "/e.pt").code, 0);
  auto r = run_cli("import " + run + "/checkpoint.pt --out " + dir + "/imp");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a seqmix checkpoint")) << r.output;
  r = run_cli("generate " + dir + "/e.pt");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a seqmix export")) << r.output;
  EXPECT_TRUE(contains(r.output, "seqmix import")) << r.output;
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  r = run_cli("import " + fifo + " --out " + dir + "/imp");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a FIFO")) << r.output;
  r = run_cli("import " + dir + " --out " + dir + "/imp");
  EXPECT_TRUE(contains(r.output, "is a folder")) << r.output;
  r = run_cli("eval " + fifo);
  EXPECT_TRUE(contains(r.output, "is a FIFO")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/imp"));
}

TEST(Messages, SayWhatIsSo) {
  const std::string dir = temp_dir("hostile-messages");
  const std::string run = tiny_run(dir);
  // A top_p inside (0, 1] that float cannot hold: greedy on the kept token, no backtrace.
  auto r = run_cli("generate " + run + " --top-p 1e-300 --max-new-tokens 3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "Exception raised from")) << r.output;
  // A date where a number belongs.
  std::ofstream(dir + "/date.toml") << "[train]\nlr = 1979-05-27\n";
  r = run_cli("train --config " + dir + "/date.toml --dump-config");
  EXPECT_TRUE(contains(r.output, "must be a number, got a date")) << r.output;
  // An unresolvable MASTER_ADDR says so, not "is the port in use?".
  r = run_cli("train --data " + dir + "/c.txt --size tiny --max-steps 1 --dist-timeout 3 --out " +
                  dir + "/d",
              "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 "
              "MASTER_ADDR=no-such-host.invalid MASTER_PORT=29533");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot resolve this host name")) << r.output;
  EXPECT_FALSE(contains(r.output, "port")) << r.output;
  // A prompt longer than max_len (32) is said to be cut.
  r = run_cli("generate " + run + " --prompt " + std::string(100, 'a') + " --max-new-tokens 1");
  EXPECT_TRUE(contains(r.output, "the prompt is 100 bytes, longer than the model's max_len (32)"))
      << r.output;
  // A plugin path that does not load is an error naming it, not a silent fall back.
  r = run_cli("tokenizer train --data " + dir + "/c.txt --vocab-size 300 --out " + dir +
                  "/t.model",
              "SEQMIX_SENTENCEPIECE_PLUGIN=" + dir + "/nope.so");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "SEQMIX_SENTENCEPIECE_PLUGIN: cannot load")) << r.output;
  // Resuming past a short horizon while still warming up: the note gives the real rates.
  r = run_cli("train --out " + run + " --resume --max-steps 4");
  EXPECT_TRUE(contains(r.output, "(still warming up)")) << r.output;
}

}  // namespace
