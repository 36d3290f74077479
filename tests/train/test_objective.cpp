// The objective shared by training and evaluation: its losses equal cross-entropy computed by
// hand from the model's logits, its counts are what bpc and accuracy divide by, and the
// evaluations built on it add batches up exactly.
#include <gtest/gtest.h>

#include <cmath>

#include "seqmix/data/labelled.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/classify.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/objective.h"
#include "seqmix/train/configuration/task_presets.h"

using namespace seqmix;

namespace {

models::SequenceModel small_language_model() {
  auto c = models::make_model_config("transformer", "tiny");
  c.d_model = 16;
  c.d_ff = 32;
  c.n_heads = 2;
  c.n_layers = 1;
  c.max_len = 8;
  c.vocab_size = 11;
  torch::manual_seed(5);
  return models::SequenceModel(c);
}

models::SequenceModel small_classifier(bool pair) {
  auto c = train::make_task_config("transformer", pair ? "retrieval" : "listops", "cpu").model;
  c.d_model = 16;
  c.d_ff = 32;
  c.n_heads = 2;
  c.n_layers = 1;
  c.max_len = 16;
  c.n_classes = 3;
  torch::manual_seed(6);
  return models::SequenceModel(c);
}

// -log softmax(logits)[target], in double from the float logits, one row at a time.
double nll_by_hand(const at::Tensor& logits_row, int64_t target) {
  const auto l = logits_row.to(at::kDouble).contiguous();
  const double* p = l.data_ptr<double>();
  double m = -INFINITY;
  for (int64_t v = 0; v < l.size(0); ++v) m = std::max(m, p[v]);
  double s = 0;
  for (int64_t v = 0; v < l.size(0); ++v) s += std::exp(p[v] - m);
  return m + std::log(s) - p[target];
}

std::vector<data::LabelledSequence> examples(bool pair) {
  std::vector<data::LabelledSequence> v;
  for (int i = 0; i < 7; ++i) {
    data::LabelledSequence e;
    for (int k = 0; k < 3 + i; ++k) e.tokens.push_back((i * 5 + k * 3) % 10 + 1);
    if (pair)
      for (int k = 0; k < 2 + i % 3; ++k) e.tokens_b.push_back((i + k * 7) % 10 + 1);
    e.label = i % 3;
    v.push_back(e);
  }
  return v;
}

}  // namespace

TEST(Objective, LanguageModelLossIsCrossEntropyByHand) {
  auto model = small_language_model();
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor batch = at::randint(0, 11, {3, 6}, at::kLong);  // B = 3, L = 5
  const at::Tensor logits = model->forward(batch.narrow(1, 0, 5));
  double expected = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 5; ++t)
      expected += nll_by_hand(logits[b][t], batch[b][t + 1].item<int64_t>());

  const auto mean = train::language_model_loss(model, batch);
  EXPECT_EQ(mean.count, 15);
  EXPECT_EQ(mean.correct, 0);
  EXPECT_EQ(mean.loss.dim(), 0);
  EXPECT_NEAR(mean.loss.item<double>(), expected / 15, 1e-5);
  const auto sum = train::language_model_loss(model, batch, train::LossReduction::kSum);
  EXPECT_EQ(sum.count, 15);
  EXPECT_NEAR(sum.loss.item<double>(), expected, 1e-4);
}

TEST(Objective, TrainingLossCarriesGradients) {
  auto model = small_language_model();
  model->train();
  const auto l = train::language_model_loss(model, at::randint(0, 11, {2, 9}, at::kLong));
  ASSERT_TRUE(l.loss.requires_grad());
  l.loss.backward();
  int64_t with_grad = 0;
  for (const auto& p : model->parameters())
    if (p.grad().defined() && p.grad().abs().sum().item<double>() > 0) ++with_grad;
  EXPECT_GT(with_grad, 0);
}

TEST(Objective, LanguageModelBatchShapeIsChecked) {
  auto model = small_language_model();
  EXPECT_THROW(train::language_model_loss(model, at::zeros({2, 1}, at::kLong)),
               std::invalid_argument);  // nothing to predict
  EXPECT_THROW(train::language_model_loss(model, at::zeros({6}, at::kLong)),
               std::invalid_argument);
  EXPECT_THROW(train::language_model_loss(model, at::zeros({2, 4}, at::kFloat)),
               std::invalid_argument);
  try {
    train::language_model_loss(model, at::zeros({2, 1}, at::kLong));
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 1]"), std::string::npos) << e.what();
  }
}

TEST(Objective, ClassificationLossAndCountsByHand) {
  for (bool pair : {false, true}) {
    auto model = small_classifier(pair);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto ex = examples(pair);
    std::vector<const data::LabelledSequence*> ptrs;
    for (const auto& e : ex) ptrs.push_back(&e);
    const train::ClassBatch b = train::collate(ptrs, 16);
    const at::Tensor logits = train::class_logits(model, b);
    double expected = 0;
    int64_t right = 0;
    for (int64_t i = 0; i < 7; ++i) {
      const int64_t label = b.labels[i].item<int64_t>();
      expected += nll_by_hand(logits[i], label);
      right += logits[i].argmax().item<int64_t>() == label;
    }
    const auto mean = train::classification_loss(model, b);
    EXPECT_EQ(mean.count, 7) << pair;
    EXPECT_EQ(mean.correct, right) << pair;
    EXPECT_NEAR(mean.loss.item<double>(), expected / 7, 1e-5) << pair;
    const auto sum = train::classification_loss(model, b, train::LossReduction::kSum);
    EXPECT_NEAR(sum.loss.item<double>(), expected, 1e-4) << pair;

    // evaluate_classifier is the same sum, batch by batch.
    const auto r = train::evaluate_classifier(model, ex, 3);
    EXPECT_EQ(r.examples, 7);
    EXPECT_NEAR(r.loss, expected / 7, 1e-5) << pair;
    EXPECT_DOUBLE_EQ(r.accuracy, static_cast<double>(right) / 7) << pair;
    // The chance level: labels are 0, 1, 2, 0, 1, 2, 0, so label 0 holds 3 of the 7, and 2
    // of the first 4 (the only ones scored with max_examples = 4).
    EXPECT_DOUBLE_EQ(r.majority, 3.0 / 7) << pair;
    EXPECT_DOUBLE_EQ(train::evaluate_classifier(model, ex, 3, 4).majority, 0.5) << pair;
  }
}

TEST(Objective, PairClassifierNeedsSecondSequences) {
  auto model = small_classifier(true);
  const auto ex = examples(false);
  const train::ClassBatch b = train::collate({&ex[0], &ex[1]}, 16);
  EXPECT_THROW(train::classification_loss(model, b), c10::Error);
}

TEST(Objective, TotalsAddBatchesInDouble) {
  train::LossTotals t;
  EXPECT_EQ(t.mean(), 0.0);
  EXPECT_EQ(t.accuracy(), 0.0);
  train::BatchLoss a{at::scalar_tensor(3.0), 4, 1}, b{at::scalar_tensor(5.0), 6, 3};
  t.add(a);
  t.add(b);
  EXPECT_EQ(t.count, 10);
  EXPECT_EQ(t.correct, 4);
  EXPECT_DOUBLE_EQ(t.nll, 8.0);
  EXPECT_DOUBLE_EQ(t.mean(), 0.8);
  EXPECT_DOUBLE_EQ(t.accuracy(), 0.4);
}

// evaluate() scores windows of max_len tokens with the same objective: over a stream that
// fills exactly two windows, its loss is the summed loss of those windows per token.
TEST(Objective, EvaluateIsTheObjectiveOverWindows) {
  auto c = models::make_model_config("transformer", "tiny");
  c.d_model = 16;
  c.d_ff = 32;
  c.n_heads = 2;
  c.n_layers = 1;
  c.max_len = 8;
  torch::manual_seed(7);
  models::SequenceModel model(c);
  data::TokenIds tokens;
  for (int i = 0; i < 17; ++i) tokens.push_back((i * 37) % 256);
  const auto r = train::evaluate(model, tokens, data::Tokenizer::bytes(), 2);
  EXPECT_EQ(r.tokens, 16);
  at::Tensor windows = at::empty({2, 9}, at::kLong);
  for (int64_t w = 0; w < 2; ++w) windows[w].copy_(data::tokens_to_tensor(tokens, w * 8, 9));
  torch::NoGradGuard no_grad;
  model->eval();
  const auto sum = train::language_model_loss(model, windows, train::LossReduction::kSum);
  EXPECT_NEAR(r.loss, sum.loss.item<double>() / 16, 1e-6);
  EXPECT_NEAR(r.bpc, r.loss / std::log(2.0), 1e-9);  // one byte per token
}
