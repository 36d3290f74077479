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

TEST(Sampler, GreedyTopKAndTopP) {
  at::Tensor logits = at::tensor({1.0f, 3.0f, 2.0f, 0.5f}).view({1, 4});
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  generate::SamplingOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(generate::sample_next(logits, greedy, g).item<int64_t>(), 1);
  generate::SamplingOptions k2;
  k2.top_k = 2;
  generate::SamplingOptions p;
  p.top_p = 0.8;  // probs ~ [0.08, 0.60, 0.22, 0.05]: the nucleus is {1, 2}
  std::vector<int> seen_k(4), seen_p(4);
  for (int i = 0; i < 400; ++i) {
    ++seen_k[static_cast<size_t>(generate::sample_next(logits, k2, g).item<int64_t>())];
    ++seen_p[static_cast<size_t>(generate::sample_next(logits, p, g).item<int64_t>())];
  }
  EXPECT_EQ(seen_k[0] + seen_k[3], 0);
  EXPECT_GT(seen_k[1], seen_k[2]);
  EXPECT_GT(seen_k[2], 0);
  EXPECT_EQ(seen_p[0] + seen_p[3], 0);
  EXPECT_GT(seen_p[2], 0);
  generate::SamplingOptions tiny_p;
  tiny_p.top_p = 1e-6;  // only the most likely token survives
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(generate::sample_next(logits, tiny_p, g).item<int64_t>(), 1);
}

TEST(Sampler, RejectsBadOptions) {
  generate::SamplingOptions o;
  o.top_p = 0;
  EXPECT_THROW(generate::validate(o), std::invalid_argument);
  o = {};
  o.temperature = -1;
  EXPECT_THROW(generate::validate(o), std::invalid_argument);
  o = {};
  o.top_k = -2;
  EXPECT_THROW(generate::validate(o), std::invalid_argument);
}

// The message names the option: what the CLI prints for --temperature inf or --top-p nan.
void expect_rejected(const generate::SamplingOptions& o, const std::string& names) {
  try {
    generate::validate(o);
    ADD_FAILURE() << names << ": no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(names + " must be ", 0), 0u) << e.what();
  }
}

TEST(Sampler, RejectsNonFiniteOptions) {
  // An infinite temperature divided every logit to 0: uniform sampling, silently.
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double t : {inf, -inf, nan, -1.0}) {
    generate::SamplingOptions o;
    o.temperature = t;
    expect_rejected(o, "`temperature`");
  }
  for (const double p : {inf, -inf, nan}) {
    generate::SamplingOptions o;
    o.top_p = p;
    expect_rejected(o, "`top_p`");
  }
  generate::SamplingOptions ok;
  ok.temperature = 1e-300;
  EXPECT_NO_THROW(generate::validate(ok));
}

TEST(Sampler, NonFiniteLogitsAndTinyTemperatures) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  generate::SamplingOptions o;
  // Not LibTorch's "probability tensor contains either inf, nan or element < 0".
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    const at::Tensor logits = at::tensor({1.0f, bad, 2.0f}).view({1, 3});
    for (const double t : {1.0, 0.0}) {
      o.temperature = t;
      try {
        generate::sample_next(logits, o, g);
        ADD_FAILURE() << "no error for logit " << bad << ", temperature " << t;
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "sample_next: the logits are not finite");
      }
    }
  }
  // Logits divided by a temperature this small overflow float: the token is the argmax.
  const at::Tensor logits = at::tensor({1.0f, 3.0f, 2.0f, 0.5f}).view({1, 4});
  for (const double t : {1e-300, 1e-40, 1e-30}) {
    o.temperature = t;
    o.top_p = 0.5;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(generate::sample_next(logits, o, g).item<int64_t>(), 1);
  }
}

TEST(Generate, ModelWhoseOutputIsNotFinite) {
  auto cfg = models::make_model_config("weird-net", "tiny");
  cfg.max_len = 16;
  torch::manual_seed(1);
  models::SequenceModel m(cfg);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  for (const double t : {1.0, 0.0}) {
    generate::SamplingOptions o;
    o.temperature = t;
    std::string shown;
    try {
      generate::generate_text(m, data::Tokenizer::bytes(), "ab", 5, o, 1,
                              [&](const std::string& s) { shown += s; });
      ADD_FAILURE() << "no error at temperature " << t;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()),
                "the model's output (logits) is not finite at new token 1; the checkpoint's "
                "weights produce NaN or inf");
    }
    EXPECT_EQ(shown, "");
  }
}

TEST(Generate, IsSeededAndRunsPastMaxLen) {
  auto cfg = models::make_model_config("weird-net", "tiny");
  cfg.max_len = 16;
  torch::manual_seed(1);
  models::SequenceModel m(cfg);
  generate::SamplingOptions o;
  const std::string a = generate::generate_text(m, data::Tokenizer::bytes(), "Once upon", 40, o, 9);
  const std::string b = generate::generate_text(m, data::Tokenizer::bytes(), "Once upon", 40, o, 9);
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, generate::generate_text(m, data::Tokenizer::bytes(), "Once upon", 40, o, 10));
  // Greedy decoding equals the argmax of a full forward pass on the growing text.
  o.temperature = 0;
  const std::string g = generate::generate_text(m, data::Tokenizer::bytes(), "ab", 5, o, 0);
  std::string text = "ab";
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 5; ++i) {
    at::Tensor t = at::empty({1, static_cast<int64_t>(text.size())}, at::kLong);
    for (size_t j = 0; j < text.size(); ++j)
      t[0][static_cast<int64_t>(j)] = static_cast<unsigned char>(text[j]);
    text += static_cast<char>(m->forward(t)[0][-1].argmax().item<int64_t>());
  }
  EXPECT_EQ("ab" + g, text);
}

TEST(Generate, ReportsCountsAndTimes) {
  auto cfg = models::make_model_config("weird-net", "tiny");
  cfg.max_len = 16;
  torch::manual_seed(1);
  models::SequenceModel m(cfg);
  generate::SamplingOptions o;
  generate::GenerationStats stats;
  const std::string a =
      generate::generate_text(m, data::Tokenizer::bytes(), "Once upon", 40, o, 9, {}, &stats);
  EXPECT_EQ(a, generate::generate_text(m, data::Tokenizer::bytes(), "Once upon", 40, o, 9));
  EXPECT_EQ(stats.new_tokens, 40);
  EXPECT_EQ(stats.prompt_tokens, 9);
  EXPECT_EQ(stats.unit, "bytes");
  EXPECT_EQ(stats.threads, at::get_num_threads());
  EXPECT_GE(stats.seconds, 0.0);
  const std::string line = generate::describe(stats);
  EXPECT_EQ(line.rfind("40 new bytes in ", 0), 0u) << line;
  EXPECT_NE(line.find(" bytes/s, "), std::string::npos) << line;
  EXPECT_NE(line.find("; prompt of 9 bytes in "), std::string::npos) << line;
  stats.new_tokens = 1;
  stats.prompt_tokens = 1;
  EXPECT_EQ(generate::describe(stats).rfind("1 new byte in ", 0), 0u) << generate::describe(stats);
  EXPECT_NE(generate::describe(stats).find("prompt of 1 byte in"), std::string::npos);
  // A prompt longer than the window counts only the tail that was fed.
  generate::generate_text(m, data::Tokenizer::bytes(), std::string(50, 'x'), 3, o, 1, {}, &stats);
  EXPECT_EQ(stats.prompt_tokens, 16);
  EXPECT_EQ(stats.new_tokens, 3);
}

// Per-token work is tiny: one thread unless the caller asks for more, and then the passive
// OpenMP wait policy unless the user chose one.
TEST(Generate, ThreadDefaultsAndWaitPolicy) {
  EXPECT_EQ(generate::generate_threads(0), 1);
  EXPECT_EQ(generate::generate_threads(2), 2);
  EXPECT_EQ(util::omp_wait_policy_override(nullptr, 2), "passive");
  EXPECT_EQ(util::omp_wait_policy_override(nullptr, 1), "");
  EXPECT_EQ(util::omp_wait_policy_override("active", 2), "");
  EXPECT_EQ(util::omp_wait_policy_override("", 4), "");
}

// The command line: the default is one thread, --threads 2 runs with OMP_WAIT_POLICY=passive
// (a user's setting kept), and a line on stderr gives the rate. Needs the `generate` command
// to call generate_threads, reexec_with_passive_omp_wait and print describe(stats)
// (apps/seqmix/main.cpp); run it with --gtest_also_run_disabled_tests until it does.
}  // namespace
