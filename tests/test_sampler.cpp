#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "seqmix/generate/sampler.h"
#include "seqmix/models/presets.h"

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

}  // namespace
