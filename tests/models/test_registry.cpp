// Adding a mixer through the registry alone: a causal moving average defined here, in the
// test, builds into a model, trains, decodes step by step like its forward pass, and is
// listed by `seqmix info`'s catalog, without any library file knowing its name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "seqmix/models/catalog.h"
#include "seqmix/models/mixer_registry.h"
#include "seqmix/models/presets.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"

using namespace seqmix;

namespace {

// y_i = W (x_i + x_{i-1} + ... + x_{i-K+1}) / K over the valid positions (padding zeroed).
// Decoding state: tensors {window [B, K-1, D]} holding the last K-1 inputs, oldest first.
class MovingAverageImpl : public nn::MixerImpl {
 public:
  MovingAverageImpl(int64_t d_model, int64_t window)
      : nn::MixerImpl("MovingAverage"), window_(window) {
    proj = register_module("proj", torch::nn::Linear(d_model, d_model));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override {
    at::Tensor v = mask.defined() ? x * mask.unsqueeze(-1).to(x.scalar_type()) : x;
    const int64_t L = v.size(1);
    at::Tensor sum = v.cumsum(1);
    if (L > window_) {
      const at::Tensor before = sum.narrow(1, 0, L - window_);
      sum = at::cat({sum.narrow(1, 0, window_), sum.narrow(1, window_, L - window_) - before}, 1);
    }
    return proj(sum / static_cast<double>(window_));
  }
  nn::MixerState init_state(int64_t batch) const override {
    nn::MixerState s;
    s.tensors = {at::zeros({batch, window_ - 1, proj->weight.size(1)})};
    return s;
  }
  at::Tensor step(const at::Tensor& x_t, nn::MixerState& state) override {
    at::Tensor& w = state.tensors[0];
    const at::Tensor y = proj((w.sum(1) + x_t) / static_cast<double>(window_));
    w = at::cat({w.narrow(1, 1, window_ - 2), x_t.unsqueeze(1)}, 1);
    ++state.pos;
    return y;
  }
  bool causal() const override { return true; }

  torch::nn::Linear proj{nullptr};

 private:
  int64_t window_;
};

// Registers the mixer for one test and removes it after, so other tests see the built-ins.
struct Registered {
  Registered() {
    models::MixerSpec spec;
    spec.name = "moving-average";
    spec.summary = "causal mean of the last 3 positions, then a linear map";
    spec.source = "tests/models/test_registry.cpp";
    spec.bidirectional = false;
    spec.parameters = [](const models::ModelConfig& c) {  // proj: D x D weights and D biases
      return static_cast<long double>(c.d_model) * (c.d_model + 1);
    };
    spec.build = [](const models::ModelConfig& c, int64_t) {
      return std::make_shared<MovingAverageImpl>(c.d_model, 3);
    };
    models::register_mixer(spec);
  }
  ~Registered() { models::unregister_mixer("moving-average"); }
};

models::ModelConfig toy_config() {
  auto c = models::make_model_config("weird-net", "tiny");
  c.mixers = {"moving-average", "attention"};
  c.d_model = 16;
  c.d_ff = 32;
  c.max_len = 24;
  return c;
}

}  // namespace

TEST(MixerRegistry, UnknownAndDuplicateNamesAreErrors) {
  try {
    models::find_mixer("moving-average");
    FAIL() << "not registered yet";
  } catch (const std::invalid_argument& e) {
    // The message lists every registered mixer, in registry order.
    const std::string m = e.what();
    EXPECT_NE(m.find("(expected aib, attention, extractor"), std::string::npos) << m;
    for (const auto& row : models::mixer_registry())
      EXPECT_NE(m.find(row.name), std::string::npos) << m;
  }
  Registered r;
  models::MixerSpec again;
  again.name = "aib";
  again.build = [](const models::ModelConfig&, int64_t) {
    return std::shared_ptr<nn::MixerImpl>();
  };
  again.parameters = [](const models::ModelConfig&) { return 0.0L; };
  EXPECT_THROW(models::register_mixer(again), std::invalid_argument);
  again.name = "no-formula";
  again.parameters = nullptr;
  EXPECT_THROW(models::register_mixer(again), std::invalid_argument);
  EXPECT_THROW(models::unregister_mixer("aib"), std::invalid_argument);  // built-in
}

TEST(MixerRegistry, ToyMixerBuildsCountsAndValidates) {
  Registered r;
  auto c = toy_config();
  EXPECT_NO_THROW(c.validate());
  models::SequenceModel model(c);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  EXPECT_EQ(c.num_parameters(), n);
  // Its row says it has no bidirectional form.
  c.causal = false;
  try {
    c.validate();
    FAIL() << "expected model.causal to be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.causal: mixer 'moving-average' is causal only"),
              std::string::npos)
        << e.what();
  }
  // A resolved configuration takes it like any built-in.
  const auto run = train::resolve_config(
      "", {"model.preset=weird-net", "model.size=tiny", "model.mixers=['moving-average']"});
  EXPECT_EQ(run.model.mixers, std::vector<std::string>{"moving-average"});
}

TEST(MixerRegistry, ToyMixerTrains) {
  Registered r;
  torch::manual_seed(0);
  models::SequenceModel model(toy_config());
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  // A sequence the moving average can learn: each token repeats the one two places back.
  at::Tensor base = at::randint(8, {4, 2}, at::kLong);
  at::Tensor tokens = base.repeat({1, 12});  // [4, 24]
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const at::Tensor logits = model->forward(tokens.narrow(1, 0, 23));
    const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 256}),
                                                   tokens.narrow(1, 1, 23).reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

TEST(MixerRegistry, ToyMixerStepEqualsForward) {
  Registered r;
  torch::manual_seed(1);
  models::SequenceModel model(toy_config());
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = at::randint(256, {2, 10}, at::kLong);
  const at::Tensor full = model->forward(tokens);
  auto states = model->init_state(2);
  for (int64_t i = 0; i < 10; ++i) {
    const at::Tensor y = model->step(tokens.select(1, i), states);
    EXPECT_TRUE(at::allclose(y, full.select(1, i), 1e-4, 1e-5)) << "position " << i;
  }
}

TEST(MixerRegistry, ToyMixerIsListedByInfo) {
  EXPECT_EQ(models::describe_catalog().find("moving-average"), std::string::npos);
  Registered r;
  const std::string text = models::describe_catalog();
  EXPECT_NE(text.find("moving-average"), std::string::npos) << text;
  EXPECT_NE(text.find("causal mean of the last 3 positions"), std::string::npos) << text;
  for (size_t start = 0, end; start < text.size(); start = end + 1) {
    end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    EXPECT_LE(end - start, 80u) << text.substr(start, end - start);
  }
}

TEST(MixerRegistry, ARowWithoutIncrementalDecodingRefusesToDecode) {
  Registered r;
  models::MixerSpec spec = models::find_mixer("moving-average");
  spec.name = "moving-average-no-step";
  spec.incremental = false;
  models::register_mixer(spec);
  auto c = toy_config();
  c.mixers = {"moving-average-no-step"};
  models::SequenceModel model(c);
  EXPECT_THROW(model->init_state(1), std::logic_error);
  models::unregister_mixer("moving-average-no-step");
}

TEST(MixerRegistry, InfoListsEachSectionsKeysWithTheirDocs) {
  const std::string text = models::describe_catalog();
  EXPECT_NE(text.find("model.aib.weights = 'prefix_exp': per-distance weights"), std::string::npos)
      << text;
  EXPECT_NE(text.find("model.ces.r_min = 0.1"), std::string::npos) << text;
}

TEST(MixerRegistry, NoPresetOrMixerNameOutsideTheTables) {
  // Every preset row resolves, and each listed mixer is in the registry.
  for (const auto& p : models::model_presets()) {
    const auto c = models::make_model_config(p.name, "tiny");
    for (const auto& m : c.mixers) EXPECT_NO_THROW(models::find_mixer(m)) << p.name;
  }
}
