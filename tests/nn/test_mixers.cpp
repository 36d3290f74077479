// Layer-level tests for every sequence mixer: incremental `step` agrees with `forward`, masks
// remove padded positions, gradients through the layer match finite differences.
#include <gtest/gtest.h>

#include <algorithm>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/models/presets.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/block.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/feed_forward.h"
#include "seqmix/nn/self_attention.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

// One case per registry row and per variant its row declares (models/mixer_registry.h): the
// registry is the list, so a mixer added to it is tested here without an edit.
struct MixerCase {
  std::string name;    // "<mixer>_<variant>"
  std::string mixer;   // the registry row
  std::vector<std::pair<std::string, util::FieldValue>> settings;  // of its section
  bool causal_form = true, bidirectional_form = true, decodes = true, zero_padded = true;

  // The mixer of a tiny one-layer model: D = 8, 2 heads, d_ff 12, 40 positions. A direction
  // the mixer does not have falls back to the one it has.
  std::shared_ptr<nn::MixerImpl> make(bool causal) const {
    models::ModelConfig c;
    c.d_model = 8;
    c.n_heads = 2;
    c.d_ff = 12;
    c.max_len = 40;
    c.n_layers = 1;
    c.mixers = {mixer};
    c.causal = causal ? causal_form : !bidirectional_form;
    const models::MixerSpec& spec = models::find_mixer(mixer);
    std::vector<models::FieldAssignment> assignments;
    for (const auto& [key, value] : settings)
      assignments.push_back({spec.section + "." + key, value});
    models::apply_model_fields(c, assignments);
    c.validate();
    return spec.build(c, 0);
  }
};

void PrintTo(const MixerCase& c, std::ostream* os) { *os << c.name; }

std::vector<MixerCase> mixers() {
  std::vector<MixerCase> cases;
  for (const auto& spec : models::mixer_registry()) {
    MixerCase base;
    base.mixer = spec.name;
    base.causal_form = spec.causal;
    base.bidirectional_form = spec.bidirectional;
    base.decodes = spec.causal && spec.incremental;
    base.zero_padded = spec.zero_padded_outputs;
    std::string id = spec.name;
    std::replace(id.begin(), id.end(), '-', '_');
    base.name = id + "_defaults";
    cases.push_back(base);
    for (const auto& v : spec.variants) {
      MixerCase c = base;
      c.name = id + "_" + v.name;
      c.settings = v.settings;
      cases.push_back(c);
    }
  }
  return cases;
}

class Mixer : public ::testing::TestWithParam<MixerCase> {};

TEST_P(Mixer, StepMatchesForwardOnTheSamePrefix) {
  if (!GetParam().decodes) GTEST_SKIP() << "the mixer does not decode step by step";
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
    // Every valid output; padded outputs too where the mixer zeroes them.
    if (GetParam().zero_padded) {
      EXPECT_TRUE(at::allclose(y1, y2, 1e-10, 1e-10)) << "causal=" << causal;
    } else {
      EXPECT_TRUE(at::allclose(y1[0].narrow(0, 0, valid), y2[0].narrow(0, 0, valid), 1e-10,
                               1e-10) &&
                  at::allclose(y1[1], y2[1], 1e-10, 1e-10))
          << "causal=" << causal;
    }
    EXPECT_TRUE(at::allclose(y1[0].narrow(0, 0, valid), alone[0], 1e-9, 1e-9))
        << "causal=" << causal;
    if (GetParam().zero_padded) {
      EXPECT_EQ(y1[0].narrow(0, valid, L - valid).abs().sum().item<double>(), 0.0);
    }
    EXPECT_TRUE(at::isfinite(y2).all().item<bool>());
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

// A whole one-layer model per row: the registry's parameter formula counts exactly what the
// layer creates, and one training step reaches every parameter with a finite gradient.
TEST_P(Mixer, TinyModelCountsItsParametersAndEveryOneLearns) {
  for (bool causal : {true, false}) {
    torch::manual_seed(14);
    auto mixer = GetParam().make(causal);
    models::ModelConfig c;
    c.d_model = 8, c.n_heads = 2, c.d_ff = 12, c.max_len = 40, c.n_layers = 2;
    c.vocab_size = 11;
    c.mixers = {GetParam().mixer};
    c.causal = mixer->causal();
    std::vector<models::FieldAssignment> assignments;
    const models::MixerSpec& spec = models::find_mixer(GetParam().mixer);
    for (const auto& [key, value] : GetParam().settings)
      assignments.push_back({spec.section + "." + key, value});
    models::apply_model_fields(c, assignments);
    models::SequenceModel model(c);
    int64_t n = 0;  // trainable ones (PS attention keeps a frozen w)
    for (const auto& p : model->parameters())
      if (p.requires_grad()) n += p.numel();
    EXPECT_EQ(n, c.num_parameters()) << "causal=" << causal;
    at::Tensor tokens = at::randint(11, {2, 9});
    at::Tensor logits = model->forward(tokens);
    ASSERT_EQ(logits.sizes(), (at::IntArrayRef{2, 9, 11}));
    at::cross_entropy_loss(logits.reshape({-1, 11}), tokens.reshape({-1})).backward();
    for (const auto& p : model->named_parameters()) {
      if (!p.value().requires_grad()) continue;
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(at::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, Mixer, ::testing::ValuesIn(mixers()),
                         [](const ::testing::TestParamInfo<MixerCase>& i) { return i.param.name; });

TEST(AIBAttention, EncoderCannotDecode) {
  nn::AIBAttention m(nn::AIBAttentionOptions(8, 16).causal(false));
  EXPECT_THROW(m->init_state(1), std::logic_error);
}

// The decoding state keeps exp(A_j - running max) and rescales it when a channel's maximum
// grows. Inputs whose A rises through hundreds (a new maximum in most steps, exp(A) far
// beyond float64's range) and then falls must still give the forward pass's outputs.
TEST(AIBAttention, StepMatchesForwardWhenTheMaximumKeepsGrowing) {
  torch::manual_seed(5);
  nn::AIBAttention m(nn::AIBAttentionOptions(8, 64));
  m->to(at::kDouble);
  m->eval();
  const int64_t B = 2, L = 60;
  const at::Tensor ramp = at::cat({at::linspace(0, 800, 40, at::kDouble),
                                   at::linspace(800, -400, 20, at::kDouble)})
                              .view({1, L, 1});
  const at::Tensor x = at::randn({B, L, 8}, at::kDouble) + ramp;
  torch::NoGradGuard no_grad;
  const at::Tensor full = m->forward(x, {});
  ASSERT_TRUE(at::isfinite(full).all().item<bool>());
  nn::MixerState state = m->init_state(B);
  for (int64_t t = 0; t < L; ++t) {
    const at::Tensor y = m->step(x.select(1, t), state);
    ASSERT_TRUE(at::allclose(y, full.select(1, t), 1e-9, 1e-9))
        << "position " << t << " max diff " << (y - full.select(1, t)).abs().max().item<double>();
  }
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

// ---- clone(): every nn module is a torch::nn::Cloneable ------------------------------------

namespace {

// `copy` holds the same parameters and buffers as `original`, under the same names, each in
// storage of its own.
void expect_deep_copy(const torch::nn::Module& original, const torch::nn::Module& copy) {
  const auto params = original.named_parameters(), copied = copy.named_parameters();
  ASSERT_EQ(params.size(), copied.size());
  ASSERT_GT(params.size(), 0u);
  for (const auto& p : params) {
    const at::Tensor* q = copied.find(p.key());
    ASSERT_NE(q, nullptr) << p.key();
    EXPECT_TRUE(at::equal(p.value(), *q)) << p.key();
    EXPECT_NE(p.value().data_ptr(), q->data_ptr()) << p.key() << " shares storage";
    EXPECT_EQ(p.value().requires_grad(), q->requires_grad()) << p.key();
  }
  const auto buffers = original.named_buffers(), copied_buffers = copy.named_buffers();
  ASSERT_EQ(buffers.size(), copied_buffers.size());
  for (const auto& b : buffers) {
    const at::Tensor* q = copied_buffers.find(b.key());
    ASSERT_NE(q, nullptr) << b.key();
    EXPECT_TRUE(at::equal(b.value(), *q)) << b.key();
    EXPECT_NE(b.value().data_ptr(), q->data_ptr()) << b.key() << " shares storage";
  }
}

// Changing every parameter of `copy` leaves `original` as it was.
void expect_independent(torch::nn::Module& original, torch::nn::Module& copy) {
  std::vector<at::Tensor> before;
  for (const auto& p : original.parameters()) before.push_back(p.detach().clone());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : copy.parameters()) p.add_(1.0);
  }
  const auto after = original.parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(after[i], before[i])) << i;
}

class MixerClone : public ::testing::TestWithParam<MixerCase> {};

// Through the interface models hold mixers by: shared_ptr<MixerImpl>.
TEST_P(MixerClone, CloneComputesTheSameWithParametersOfItsOwn) {
  for (bool causal : {true, false}) {
  torch::manual_seed(21);
  std::shared_ptr<nn::MixerImpl> m = GetParam().make(causal);
  m->eval();
  auto copy = std::dynamic_pointer_cast<nn::MixerImpl>(m->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(typeid(*copy), typeid(*m));
  EXPECT_EQ(copy->name(), m->name());
  EXPECT_EQ(copy->causal(), m->causal());
  EXPECT_FALSE(copy->is_training());
  expect_deep_copy(*m, *copy);
  const int64_t B = 2, L = 12;
  at::Tensor x = at::randn({B, L, 8});
  at::Tensor mask = at::ones({B, L}, at::kBool);
  mask.index_put_({1, at::indexing::Slice(9, L)}, false);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(copy->forward(x, {}), m->forward(x, {})));
  EXPECT_TRUE(at::equal(copy->forward(x, mask), m->forward(x, mask)));
  if (m->causal()) {  // the copy decodes too, from its own state
    nn::MixerState a = m->init_state(B), b = copy->init_state(B);
    for (int64_t t = 0; t < 3; ++t)
      EXPECT_TRUE(at::equal(copy->step(x.select(1, t), b), m->step(x.select(1, t), a))) << t;
  }
  expect_independent(*m, *copy);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, MixerClone, ::testing::ValuesIn(mixers()),
                         [](const ::testing::TestParamInfo<MixerCase>& i) { return i.param.name; });

TEST(FeedForward, CloneComputesTheSameWithParametersOfItsOwn) {
  torch::manual_seed(22);
  nn::FeedForward ffn(nn::FeedForwardOptions(8, 20).activation(nn::Activation::relu));
  auto copy = std::dynamic_pointer_cast<nn::FeedForwardImpl>(ffn->clone());
  ASSERT_NE(copy, nullptr);
  expect_deep_copy(*ffn, *copy);
  at::Tensor x = at::randn({3, 5, 8});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(copy->forward(x), ffn->forward(x)));
  expect_independent(*ffn, *copy);
}

TEST(CES, CloneComputesTheSameWithParametersOfItsOwn) {
  torch::manual_seed(23);
  nn::CES ces(nn::CESOptions(6).normalize(true));
  auto copy = std::dynamic_pointer_cast<nn::CESImpl>(ces->clone());
  ASSERT_NE(copy, nullptr);
  expect_deep_copy(*ces, *copy);
  at::Tensor x = at::randn({2, 9, 6});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(copy->forward(x), ces->forward(x)));
  expect_independent(*ces, *copy);
}

// etsmlp Table 3's ablations: which parameters exist, and what the fixed ones are.
TEST(CES, AblationsFixAlphaBetaOrTheImaginaryParts) {
  const int64_t H = 8;
  for (const bool alpha : {true, false})
    for (const bool beta : {true, false})
      for (const bool real : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "alpha " << alpha << " beta " << beta << " real "
                                          << real);
        torch::manual_seed(5);
        nn::CES ces(nn::CESOptions(H).alpha(alpha).beta(beta).real(real));
        const int64_t parts = real ? 2 - 1 : 2;
        EXPECT_EQ(ces->log_lambda.sizes(), (std::vector<int64_t>{H, parts}));
        EXPECT_EQ(ces->log_alpha.defined(), alpha);
        EXPECT_EQ(ces->log_beta.defined(), beta);
        int64_t n = 0;
        for (const auto& p : ces->parameters()) n += p.numel();
        EXPECT_EQ(n, (1 + alpha + beta) * parts * H + H) << "lambda, alpha, beta and omega";
        const auto k = ces->coefficients();
        const at::Tensor mur = k.mu.select(1, 0), mui = k.mu.select(1, 1);
        if (real) {
          // Real lambda in (0, 1) and real alpha: mu real (to sin(pi) in float32).
          EXPECT_LT(mui.abs().max().item<double>(), 1e-6);
          EXPECT_GT(mur.min().item<double>(), 0.0);
        } else {
          EXPECT_GT(mui.abs().max().item<double>(), 1e-2);
        }
        if (!alpha) {
          // alpha = 1: q = log(lambda) = exp(lambda'), bounded as eq. 12 says.
          const at::Tensor ll = real ? at::cat({ces->log_lambda, at::full({H, 1}, M_PI)}, 1)
                                     : ces->log_lambda;
          const at::Tensor qr = at::exp(ll.select(1, 0)) * at::cos(ll.select(1, 1));
          EXPECT_TRUE(at::allclose(k.q.select(1, 0), at::clamp_max(qr, std::log(0.9999)),
                                   1e-6, 1e-6));
        }
        if (!beta) {
          // beta = 1: c = 1 - mu.
          EXPECT_TRUE(at::allclose(k.c.select(1, 0), 1 - mur, 1e-6, 1e-7));
          EXPECT_TRUE(at::allclose(k.c.select(1, 1), -mui, 1e-6, 1e-7));
        }
        // Every parameter that exists learns, and nothing is NaN.
        at::Tensor y = ces(at::randn({2, 12, H}));
        y.pow(2).sum().backward();
        for (const auto& p : ces->parameters()) {
          ASSERT_TRUE(p.grad().defined());
          EXPECT_TRUE(at::isfinite(p.grad()).all().item<bool>());
          EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0);
        }
      }
}

// A block's mixer comes from outside; its clone gets a mixer of its own, and the norms'
// buffers (BatchNorm's running statistics) come along.
TEST(Block, CloneCopiesTheMixerTheFfnAndTheNorms) {
  for (const std::string norm_type : {"layer", "batch"}) {
    torch::manual_seed(24);
    auto mixer = std::make_shared<nn::AIBAttentionImpl>(nn::AIBAttentionOptions(8, 16));
    nn::Block block(mixer, nn::FeedForwardOptions(8, 16), /*pre_norm=*/true, /*dropout=*/0.0,
                    /*norm=*/true, /*with_ffn=*/true, norm_type);
    at::Tensor x = at::randn({2, 10, 8});
    {
      torch::NoGradGuard no_grad;
      block->forward(x, {});  // training mode: moves BatchNorm's running statistics
    }
    block->eval();
    auto copy = std::dynamic_pointer_cast<nn::BlockImpl>(block->clone());
    ASSERT_NE(copy, nullptr) << norm_type;
    EXPECT_NE(copy->mixer.get(), block->mixer.get()) << norm_type;
    EXPECT_EQ(block->mixer.get(), mixer.get()) << "the original keeps the mixer it was given";
    ASSERT_NE(std::dynamic_pointer_cast<nn::AIBAttentionImpl>(copy->mixer), nullptr);
    EXPECT_EQ(copy->named_children().size(), block->named_children().size()) << norm_type;
    expect_deep_copy(*block, *copy);
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(at::equal(copy->forward(x, {}), block->forward(x, {}))) << norm_type;
    nn::MixerState a = block->mixer->init_state(2), b = copy->mixer->init_state(2);
    EXPECT_TRUE(at::equal(copy->step(x.select(1, 0), b), block->step(x.select(1, 0), a)));
    expect_independent(*block, *copy);
  }
  // The ETSMLP block: no FFN, the ESMLP as its mixer.
  torch::manual_seed(25);
  nn::Block esmlp_block = nn::make_esmlp_block(nn::ESMLPOptions(8, 12).causal(false), "batch");
  esmlp_block->eval();
  auto copy = std::dynamic_pointer_cast<nn::BlockImpl>(esmlp_block->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_FALSE(copy->ffn);
  expect_deep_copy(*esmlp_block, *copy);
  at::Tensor x = at::randn({2, 10, 8});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(copy->forward(x, {}), esmlp_block->forward(x, {})));
}

}  // namespace
