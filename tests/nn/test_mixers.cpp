// Layer-level tests for every sequence mixer: incremental `step` agrees with `forward`, masks
// remove padded positions, gradients through the layer match finite differences.
#include <gtest/gtest.h>

#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/self_attention.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

struct MixerCase {
  std::string name;
  std::function<std::shared_ptr<nn::MixerImpl>(bool causal)> make;
};

std::vector<MixerCase> mixers() {
  constexpr int64_t D = 8, max_len = 40;
  return {
      {"aib_prefix_exp",
       [](bool causal) {
         return std::make_shared<nn::AIBAttentionImpl>(
             nn::AIBAttentionOptions(D, max_len).causal(causal));
       }},
      {"aib_exp_bias",
       [](bool causal) {
         return std::make_shared<nn::AIBAttentionImpl>(nn::AIBAttentionOptions(D, max_len)
                                                           .causal(causal)
                                                           .weights(ops::AIBWeights::exp)
                                                           .bias_av(true));
       }},
      {"ps_attention",
       [](bool causal) {
         return std::make_shared<nn::AIBAttentionImpl>(
             nn::AIBAttentionOptions(D, max_len).causal(causal).weights(ops::AIBWeights::ones));
       }},
      // The Extractor is causal only; `causal` is ignored.
      {"extractor",
       [](bool) {
         return std::make_shared<nn::ExtractorImpl>(nn::ExtractorOptions(D, max_len));
       }},
      {"extractor_no_adjust_no_opt",
       [](bool) {
         return std::make_shared<nn::ExtractorImpl>(
             nn::ExtractorOptions(D, max_len).adjust(false).out_proj(false));
       }},
      {"self_attention_2_heads",
       [](bool causal) {
         return std::make_shared<nn::SelfAttentionImpl>(
             nn::SelfAttentionOptions(D, 2).causal(causal));
       }},
  };
}

class Mixer : public ::testing::TestWithParam<MixerCase> {};

TEST_P(Mixer, StepMatchesForwardOnTheSamePrefix) {
  torch::manual_seed(11);
  auto m = GetParam().make(true);
  m->to(at::kDouble);
  m->eval();
  const int64_t B = 3, L = 37;
  at::Tensor x = at::randn({B, L, 8}, at::kDouble);
  torch::NoGradGuard no_grad;
  at::Tensor full = m->forward(x, {});
  nn::MixerState state = m->init_state(B);
  for (int64_t t = 0; t < L; ++t) {
    at::Tensor y = m->step(x.select(1, t), state);
    ASSERT_TRUE(at::allclose(y, full.select(1, t), 1e-9, 1e-9))
        << "position " << t << " max diff " << (y - full.select(1, t)).abs().max().item<double>();
  }
  EXPECT_EQ(state.pos, L);
}

TEST_P(Mixer, PaddedPositionsContributeNothing) {
  for (bool causal : {true, false}) {
    torch::manual_seed(12);
    auto m = GetParam().make(causal);
    m->to(at::kDouble);
    const int64_t L = 21, valid = 13;
    at::Tensor x = at::randn({2, L, 8}, at::kDouble);
    at::Tensor mask = at::ones({2, L}, at::kBool);
    mask[0].narrow(0, valid, L - valid).fill_(false);
    at::Tensor garbage = x.clone();
    garbage[0].narrow(0, valid, L - valid).normal_(0, 100);
    torch::NoGradGuard no_grad;
    at::Tensor y1 = m->forward(x, mask), y2 = m->forward(garbage, mask);
    at::Tensor alone = m->forward(x[0].narrow(0, 0, valid).unsqueeze(0), {});
    EXPECT_TRUE(at::allclose(y1, y2, 1e-10, 1e-10)) << "causal=" << causal;
    EXPECT_TRUE(at::allclose(y1[0].narrow(0, 0, valid), alone[0], 1e-9, 1e-9))
        << "causal=" << causal;
    EXPECT_EQ(y1[0].narrow(0, valid, L - valid).abs().sum().item<double>(), 0.0);
    // The unpadded row is what it is without a mask.
    EXPECT_TRUE(at::allclose(y1[1], m->forward(x, {})[1], 1e-10, 1e-10));
  }
}

TEST_P(Mixer, FullyPaddedRowIsFinite) {
  for (bool causal : {true, false}) {
    auto m = GetParam().make(causal);
    at::Tensor x = at::randn({2, 6, 8}).requires_grad_(true);
    at::Tensor mask = at::ones({2, 6}, at::kBool);
    mask[1].fill_(false);
    at::Tensor y = m->forward(x, mask);
    EXPECT_TRUE(at::isfinite(y).all().item<bool>());
    y.sum().backward();
    EXPECT_TRUE(at::isfinite(x.grad()).all().item<bool>());
    for (const auto& p : m->parameters())
      if (p.grad().defined()) {
        EXPECT_TRUE(at::isfinite(p.grad()).all().item<bool>());
      }
  }
}

TEST_P(Mixer, InputGradientMatchesFiniteDifferences) {
  for (bool causal : {true, false}) {
    torch::manual_seed(13);
    auto m = GetParam().make(causal);
    m->to(at::kDouble);
    at::Tensor x = at::randn({2, 9, 8}, at::kDouble).requires_grad_(true);
    at::Tensor mask = at::ones({2, 9}, at::kBool);
    mask[1].narrow(0, 6, 3).fill_(false);
    seqmix::testing::expect_gradients_match_fd(
        [&](const std::vector<at::Tensor>& in) { return m->forward(in[0], mask); }, {x}, 40);
  }
}

INSTANTIATE_TEST_SUITE_P(All, Mixer, ::testing::ValuesIn(mixers()),
                         [](const ::testing::TestParamInfo<MixerCase>& i) { return i.param.name; });

TEST(AIBAttention, EncoderCannotDecode) {
  nn::AIBAttention m(nn::AIBAttentionOptions(8, 16).causal(false));
  EXPECT_THROW(m->init_state(1), std::logic_error);
}

TEST(AIBAttention, RejectsSequencesLongerThanMaxLen) {
  nn::AIBAttention m(nn::AIBAttentionOptions(8, 16));
  EXPECT_THROW(m->forward(at::randn({1, 17, 8}), {}), c10::Error);
}

TEST(AIBAttention, InitialisationFollowsThePaper) {
  // weird-net Sec. III.G: W_A, W_V ~ N(0, 1/D), w ~ N(0, 1), W_O ~ N(0, (1 - 2/D)/(2 N D)).
  torch::manual_seed(14);
  const int64_t D = 256, N = 4;
  nn::AIBAttention m(nn::AIBAttentionOptions(D, 1 << 12).n_layers(N));
  EXPECT_NEAR(m->w_a->weight.std().item<double>(), 1.0 / std::sqrt(D), 0.003);
  EXPECT_NEAR(m->w_v->weight.std().item<double>(), 1.0 / std::sqrt(D), 0.003);
  EXPECT_NEAR(m->w.std().item<double>(), 1.0, 0.03);
  EXPECT_NEAR(m->w_o->weight.std().item<double>(), std::sqrt((1 - 2.0 / D) / (2.0 * N * D)), 0.001);
  EXPECT_EQ(m->w.size(0), 12);
}

}  // namespace
