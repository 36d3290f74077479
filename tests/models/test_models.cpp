#include <gtest/gtest.h>

#include "seqmix/models/presets.h"
#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/precision.h"
#include "seqmix/nn/self_attention.h"

using namespace seqmix;

namespace {

TEST(Presets, ParameterCountFormulaMatchesTheBuiltModel) {
  for (const auto& family : models::family_names()) {
    for (const char* size : {"tiny", "mini"}) {
      auto cfg = models::make_model_config(family, size);
      models::SequenceModel m(cfg);
      int64_t n = 0;
      for (const auto& p : m->parameters())
        if (p.requires_grad()) n += p.numel();
      EXPECT_EQ(n, cfg.num_parameters()) << family << " " << size;
    }
  }
  // ETSMLP's ablations (etsmlp Table 3) change the CES parameters.
  for (const char* family : {"etsmlp", "etsmlp-lm"})
    for (int ablation = 0; ablation < 3; ++ablation) {
      auto cfg = models::make_model_config(family, "tiny");
      nn::CESOptions& ces = cfg.options<nn::ESMLPOptions>("ces").ces();
      if (ablation == 0) ces.alpha(false);
      if (ablation == 1) ces.beta(false);
      if (ablation == 2) ces.real(true);
      models::SequenceModel m(cfg);
      int64_t n = 0;
      for (const auto& p : m->parameters()) n += p.numel();
      EXPECT_EQ(n, cfg.num_parameters()) << family << " ablation " << ablation;
      EXPECT_LT(n, models::make_model_config(family, "tiny").num_parameters());
    }
  auto cfg = models::make_model_config("transformer", "tiny");
  cfg.tie_embeddings = false;
  cfg.options<nn::AIBAttentionOptions>("aib").weights(ops::AIBWeights::ones);
  models::SequenceModel m(cfg);
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  EXPECT_EQ(n, cfg.num_parameters());
}

TEST(Presets, StructuresAndTableVIISizes) {
  auto b = models::make_model_config("weird-net", "small");
  EXPECT_EQ(b.n_layers, 12);
  EXPECT_EQ(b.d_model, 768);
  EXPECT_EQ(b.d_ff, 3072);
  EXPECT_EQ(b.n_heads, 12);
  auto large = models::make_model_config("aib-net", "large");
  EXPECT_EQ(large.n_layers, 36);
  EXPECT_EQ(large.d_model, 1280);
  EXPECT_EQ(large.n_heads, 20);
  // Structure B: AIB in the 1st, 3rd, ... layers, self-attention in the 2nd, 4th, ...
  models::SequenceModel m(models::make_model_config("weird-net", "mini"));
  for (size_t i = 0; i < m->blocks->size(); ++i) {
    auto* blk = m->blocks[i]->as<nn::BlockImpl>();
    if (i % 2 == 0)
      EXPECT_NE(dynamic_cast<nn::AIBAttentionImpl*>(blk->mixer.get()), nullptr) << i;
    else
      EXPECT_NE(dynamic_cast<nn::SelfAttentionImpl*>(blk->mixer.get()), nullptr) << i;
  }
  models::SequenceModel a(models::make_model_config("weird-net-a", "tiny"));
  for (size_t i = 0; i < a->blocks->size(); ++i)
    EXPECT_NE(dynamic_cast<nn::AIBAttentionImpl*>(a->blocks[i]->as<nn::BlockImpl>()->mixer.get()),
              nullptr);
  auto moss = models::make_model_config("moss", "tiny");
  EXPECT_EQ(moss.activation, "leaky_relu");
  EXPECT_TRUE(moss.options<nn::AIBAttentionOptions>("aib").bias_av());
  EXPECT_THROW(models::make_model_config("gpt-5", "tiny"), std::invalid_argument);
  EXPECT_THROW(models::make_model_config("weird-net", "huge"), std::invalid_argument);
}

TEST(SequenceModel, IncrementalDecodingMatchesForwardForEveryFamily) {
  for (const auto& family : models::family_names()) {
    torch::manual_seed(21);
    auto cfg = models::make_model_config(family, "tiny");
    cfg.max_len = 24;
    models::SequenceModel m(cfg);
    if (!cfg.causal) {  // encoders (the ETSMLP classification presets) cannot decode
      EXPECT_THROW(m->init_state(2), std::logic_error) << family;
      continue;
    }
    m->to(at::kDouble);
    m->eval();
    torch::NoGradGuard no_grad;
    at::Tensor tokens = at::randint(256, {2, 24}, at::kLong);
    at::Tensor full = m->forward(tokens);
    auto states = m->init_state(2);
    for (int64_t t = 0; t < 24; ++t) {
      at::Tensor logits = m->step(tokens.select(1, t), states);
      ASSERT_TRUE(at::allclose(logits, full.select(1, t), 1e-8, 1e-8)) << family << " t=" << t;
    }
    EXPECT_THROW(m->step(tokens.select(1, 0), states), c10::Error);  // past max_len
  }
}

// train.precision = bf16 (nn/precision.h) for every family: the forward pass under autocast
// gives float32 logits close to the float32 model's, the parameters' gradients are float32,
// finite and close to the float32 ones, and decoding step by step under autocast agrees with
// the full forward pass under autocast.
TEST(SequenceModel, Bf16AutocastForEveryFamily) {
  for (const auto& family : models::family_names()) {
    SCOPED_TRACE(family);
    torch::manual_seed(22);
    auto cfg = models::make_model_config(family, "tiny");
    cfg.max_len = 24;
    models::SequenceModel m(cfg);
    m->eval();  // no dropout: both precisions see the same function
    const at::Tensor tokens = at::randint(256, {2, 24}, at::kLong);
    auto run = [&](nn::Precision p) {
      m->zero_grad();
      at::Tensor logits;
      {
        const nn::AutocastGuard autocast(p);
        logits = m->forward(tokens);
      }
      logits.to(at::kFloat).logsumexp(-1).mean().backward();
      std::vector<at::Tensor> grads;
      for (const auto& q : m->parameters())
        if (q.grad().defined()) grads.push_back(q.grad().clone());
      return std::make_pair(logits.detach(), grads);
    };
    const auto [l32, g32] = run(nn::Precision::fp32);
    const auto [l16, g16] = run(nn::Precision::bf16);
    EXPECT_EQ(l32.scalar_type(), at::kFloat);
    ASSERT_TRUE(at::isfinite(l16).all().item<bool>());
    // bfloat16 keeps 8 significant bits: a few ulps through the model's few layers.
    const double scale = l32.abs().max().item<double>();
    EXPECT_LT((l16.to(at::kFloat) - l32).abs().max().item<double>(), 0.05 * scale);
    ASSERT_EQ(g16.size(), g32.size());
    // Each tensor's difference relative to its own scale, or to 1% of the largest gradient
    // where its own is smaller: some gradients are 0 up to rounding (the bias of A cancels in
    // H / U), and rounding noise is all either precision gives them.
    double global = 0, worst = 0;
    for (const auto& g : g32) global = std::max(global, g.abs().max().item<double>());
    for (size_t i = 0; i < g16.size(); ++i) {
      ASSERT_EQ(g16[i].scalar_type(), at::kFloat) << "parameter gradient " << i;
      ASSERT_TRUE(at::isfinite(g16[i]).all().item<bool>()) << "parameter gradient " << i;
      const double s = std::max(g32[i].abs().max().item<double>(), 0.01 * global);
      worst = std::max(worst, (g16[i] - g32[i]).abs().max().item<double>() / s);
    }
    // Measured worst: 0.15 (etsmlp's input projection, an untrained tiny model).
    EXPECT_LT(worst, 0.3) << "largest gradient difference relative to its tensor's scale";
    // Autocast really ran the products in bfloat16: the logits differ from float32's.
    EXPECT_GT((l16.to(at::kFloat) - l32).abs().max().item<double>(), 0.0);
    if (!cfg.causal) continue;
    torch::NoGradGuard no_grad;
    const nn::AutocastGuard autocast(nn::Precision::bf16);
    const at::Tensor full = m->forward(tokens).to(at::kFloat);
    auto states = m->init_state(2);
    for (int64_t t = 0; t < 24; ++t) {
      const at::Tensor step = m->step(tokens.select(1, t), states).to(at::kFloat);
      EXPECT_LT((step - full.select(1, t)).abs().max().item<double>(), 0.05 * scale) << "t=" << t;
    }
  }
}

TEST(SequenceModel, PostNormAndUntiedHeadWork) {
  auto cfg = models::make_model_config("weird-net", "tiny");
  cfg.pre_norm = false;
  cfg.tie_embeddings = false;
  cfg.activation = "relu";
  models::SequenceModel m(cfg);
  at::Tensor y = m->forward(at::randint(256, {2, 10}, at::kLong));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10, 256}));
  EXPECT_TRUE(at::isfinite(y).all().item<bool>());
}

TEST(SequenceModel, InitialisationFollowsThePaper) {
  torch::manual_seed(22);
  auto cfg = models::make_model_config("weird-net", "mini");
  models::SequenceModel m(cfg);
  const double D = static_cast<double>(cfg.d_model), N = static_cast<double>(cfg.n_layers);
  EXPECT_NEAR(m->tok_emb->weight.std().item<double>(), 1 / std::sqrt(D), 0.003);
  EXPECT_NEAR(m->pos_emb.std().item<double>(), 1 / std::sqrt(D), 0.003);
  auto* blk = m->blocks[0]->as<nn::BlockImpl>();
  EXPECT_NEAR(blk->ffn->w_1->weight.std().item<double>(), 1 / std::sqrt(D), 0.003);
  EXPECT_NEAR(blk->ffn->w_2->weight.std().item<double>(),
              1.7047 * std::sqrt((1 - 2 / D) / (2 * N * static_cast<double>(cfg.d_ff))), 0.002);
  EXPECT_EQ(blk->ffn->w_1->bias.abs().sum().item<double>(), 0.0);
}

TEST(SequenceModel, RejectsBadInput) {
  models::SequenceModel m(models::make_model_config("transformer", "tiny"));
  EXPECT_THROW(m->forward(at::randint(256, {1, 129}, at::kLong)), c10::Error);  // > max_len
  EXPECT_THROW(m->forward(at::rand({1, 4})), c10::Error);                       // not int64
  auto cfg = models::make_model_config("transformer", "tiny");
  cfg.n_heads = 3;
  EXPECT_THROW(cfg.validate(), std::invalid_argument);
  cfg = models::make_model_config("weird-net", "tiny");
  cfg.mixers = {"aib", "lstm"};
  EXPECT_THROW(cfg.validate(), std::invalid_argument);
}

}  // namespace

namespace {

// ETSMLP: BatchNorm blocks (etsmlp Table 5's "batch" rows) train; bad names are rejected
// naming the key.
TEST(SequenceModel, EtsmlpWithBatchNormTrainsAndBadKeysAreNamed) {
  torch::manual_seed(2);
  auto cfg = models::make_model_config("etsmlp-gate-lm", "tiny");
  cfg.norm_type = "batch";
  cfg.max_len = 32;
  models::SequenceModel m(cfg);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
  const at::Tensor tokens = at::randint(0, 16, {4, 32}, at::kLong);  // a small alphabet
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    const at::Tensor logits = m->forward(tokens.narrow(1, 0, 31));
    const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 256}),
                                                   tokens.narrow(1, 1, 31).reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  auto bad = cfg;
  bad.norm_type = "group";
  try {
    bad.validate();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm_type"), std::string::npos) << e.what();
  }
  // A name the section's options cannot hold is refused when it is set, naming the key.
  bad = cfg;
  try {
    models::apply_model_fields(bad, {{"ces.shortcut", util::FieldValue(std::string("tanh"))}});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.ces.shortcut"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sigmoid"), std::string::npos) << e.what();
  }
  bad = cfg;
  bad.options<nn::ESMLPOptions>("ces").ces().r_max(1.5);
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

}  // namespace

namespace {

// Encoders mean-pool the valid positions, decoders take the last valid one; padding never
// changes the result.
TEST(SequenceModel, PooledRepresentationForClassification) {
  torch::manual_seed(8);
  for (const char* family : {"etsmlp", "etsmlp-gate", "etsmlp-lm", "weird-net-a"}) {
    auto cfg = models::make_model_config(family, "tiny");
    cfg.max_len = 20;
    if (std::string(family) == "weird-net-a") cfg.causal = false;
    models::SequenceModel m(cfg);
    m->eval();
    torch::NoGradGuard no_grad;
    at::Tensor tokens = at::randint(256, {3, 20}, at::kLong);
    at::Tensor mask = at::ones({3, 20}, at::kBool);
    mask[0].narrow(0, 12, 8).fill_(false);
    mask[2].narrow(0, 19, 1).fill_(false);
    const at::Tensor p = m->pooled(tokens, mask);
    ASSERT_EQ(p.sizes(), (at::IntArrayRef{3, cfg.d_model}));
    at::Tensor other = tokens.clone();
    other.masked_fill_(mask.logical_not(), 7);
    EXPECT_TRUE(at::allclose(p, m->pooled(other, mask), 1e-5, 1e-5)) << family;
    const at::Tensor h = m->hidden(tokens, mask);
    if (!cfg.causal) {
      EXPECT_TRUE(at::allclose(p[0], h[0].narrow(0, 0, 12).mean(0), 1e-5, 1e-5)) << family;
      EXPECT_TRUE(at::allclose(p[1], h[1].mean(0), 1e-5, 1e-5)) << family;
    } else {
      EXPECT_TRUE(at::allclose(p[0], h[0][11])) << family;
      EXPECT_TRUE(at::allclose(p[1], h[1][19])) << family;
      EXPECT_TRUE(at::allclose(p[2], h[2][18])) << family;
    }
  }
  models::SequenceModel m(models::make_model_config("etsmlp", "tiny"));
  EXPECT_THROW(m->pooled(at::zeros({1, 4}, at::kLong), at::zeros({1, 4}, at::kBool)), c10::Error);
}

}  // namespace

namespace {

// The classification head: shapes, parameter count, and a few steps of training on a
// separable toy task (the label is whether token 5 occurs) reach high accuracy.
TEST(SequenceModel, ClassificationHeadLearnsAToyTask) {
  torch::manual_seed(12);
  auto cfg = models::make_model_config("etsmlp", "tiny");
  cfg.max_len = 16;
  cfg.vocab_size = 8;
  cfg.n_classes = 2;
  models::SequenceModel m(cfg);
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  EXPECT_EQ(n, cfg.num_parameters());
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
  auto batch = [](int64_t B) {
    at::Tensor x = at::randint(0, 5, {B, 16}, at::kLong);  // tokens 0..4
    at::Tensor y = at::rand({B}) < 0.5;
    for (int64_t i = 0; i < B; ++i)
      if (y[i].item<bool>()) x[i][at::randint(16, {1}).item<int64_t>()] = 5;
    return std::make_pair(x, y.to(at::kLong));
  };
  for (int step = 0; step < 150; ++step) {
    auto [x, y] = batch(32);
    const at::Tensor loss = at::cross_entropy_loss(m->classify(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  m->eval();
  torch::NoGradGuard no_grad;
  auto [x, y] = batch(400);
  const double acc = (m->classify(x).argmax(1) == y).to(at::kFloat).mean().item<double>();
  EXPECT_GT(acc, 0.9);
  models::SequenceModel lm(models::make_model_config("etsmlp", "tiny"));
  EXPECT_THROW(lm->classify(at::zeros({1, 4}, at::kLong)), c10::Error);
  auto bad = cfg;
  bad.n_classes = -1;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

}  // namespace

TEST(SequenceModel, TokenIdsAndMaskAreChecked) {
  models::ModelConfig c = models::make_model_config("weird-net", "tiny");
  c.max_len = 16;
  models::SequenceModel m(c);
  const auto message = [&](const at::Tensor& tokens, const at::Tensor& mask) -> std::string {
    try {
      m->forward(tokens, mask);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  EXPECT_NE(message(torch::tensor({{1, 2, 256}}), {}).find("[0, 256)"), std::string::npos);
  EXPECT_NE(message(torch::tensor({{1, -1, 2}}), {}).find("-1"), std::string::npos);
  EXPECT_THROW(m->forward(torch::tensor({{1, 2, 256}})), c10::IndexError);
  EXPECT_NE(message(torch::tensor({{1, 2, 3}}), torch::ones({1, 4}, torch::kBool)).find("mask"),
            std::string::npos);
  EXPECT_NE(message(torch::tensor({{1, 2, 3}}), torch::ones({1, 3})).find("mask"),
            std::string::npos);
  EXPECT_EQ(message(torch::tensor({{1, 2, 255}}), torch::ones({1, 3}, torch::kBool)), "");
}
