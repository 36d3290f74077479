#include "seqmix/nn/aib_attention.h"

#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>

namespace seqmix::nn {

AIBAttentionImpl::AIBAttentionImpl(AIBAttentionOptions options_)
    : torch::nn::Module("AIBAttention"), options(std::move(options_)) {
  reset();
}

void AIBAttentionImpl::reset() {
  const int64_t D = options.d_model();
  TORCH_CHECK(D > 0, "AIBAttention: d_model must be positive, got ", D);
  TORCH_CHECK(options.max_len() > 0, "AIBAttention: max_len must be positive");
  TORCH_CHECK(options.causal() || D % 2 == 0,
              "AIBAttention: the bidirectional form needs an even d_model, got ", D);
  w_a = register_module("w_a",
                        torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(options.bias_av())));
  w_v = register_module("w_v",
                        torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(options.bias_av())));
  w_o = register_module("w_o", torch::nn::Linear(torch::nn::LinearOptions(D, D)));
  w = register_parameter("w", torch::empty({ops::aib_num_levels(options.max_len()), D}),
                         /*requires_grad=*/options.weights() != ops::AIBWeights::ones);
  reset_parameters();
}

void AIBAttentionImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double D = static_cast<double>(options.d_model());
  const double N = static_cast<double>(options.n_layers());
  w_a->weight.normal_(0.0, 1.0 / std::sqrt(D));
  w_v->weight.normal_(0.0, 1.0 / std::sqrt(D));
  if (options.bias_av()) {
    w_a->bias.zero_();
    w_v->bias.zero_();
  }
  w.normal_(0.0, 1.0);
  w_o->weight.normal_(0.0, std::sqrt(std::max(1.0 - 2.0 / D, 1e-3) / (2.0 * N * D)));
  w_o->bias.zero_();
}

void AIBAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::AIBAttention(d_model=" << options.d_model()
         << ", max_len=" << options.max_len() << ", causal=" << options.causal()
         << ", weights=" << ops::to_string(options.weights()) << ", bias_av=" << options.bias_av()
         << ", backend=" << ops::to_string(options.backend()) << ")";
}

at::Tensor AIBAttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.d_model(), "AIBAttention: x must be [B, L, ",
              options.d_model(), "], got ", x.sizes());
  TORCH_CHECK(x.size(1) <= options.max_len(), "AIBAttention: sequence length ", x.size(1),
              " exceeds max_len ", options.max_len());
  at::Tensor a = w_a(x), v = w_v(x);
  at::Tensor o =
      ops::aib_scan(a, v, w, mask,
                    options.causal() ? ops::Direction::causal : ops::Direction::bidirectional,
                    options.weights(), options.backend());
  return w_o(o);
}

MixerState AIBAttentionImpl::init_state(int64_t batch) const {
  if (!options.causal())
    throw std::logic_error(
        "AIBAttention: the bidirectional (encoder) form cannot decode "
        "incrementally");
  MixerState s;
  const auto opts = w.options().requires_grad(false);
  torch::NoGradGuard no_grad;
  // The per-distance weights a_d for every distance this layer can see, computed once.
  const at::Tensor lag =
      ops::aib_lag_weights(ops::aib_level_weights(w, options.weights()), options.max_len());
  s.tensors = {torch::empty({batch, 0, options.d_model()}, opts),
               torch::empty({batch, 0, options.d_model()}, opts), lag};
  return s;
}

at::Tensor AIBAttentionImpl::step(const at::Tensor& x_t, MixerState& state) {
  TORCH_CHECK(x_t.dim() == 2 && x_t.size(1) == options.d_model(),
              "AIBAttention::step: x_t must be [B, ", options.d_model(), "], got ", x_t.sizes());
  TORCH_CHECK(state.tensors.size() == 3, "AIBAttention::step: state was not made by init_state");
  TORCH_CHECK(state.pos < options.max_len(), "AIBAttention::step: position ", state.pos,
              " reaches max_len ", options.max_len());
  at::Tensor& a_cache = state.tensors[0];  // [B, t, D]
  at::Tensor& v_cache = state.tensors[1];  // [B, t, D]
  // The caches stay float32 when the projections return bfloat16 (train.precision = bf16).
  a_cache = at::cat({a_cache, w_a(x_t).unsqueeze(1).to(a_cache.scalar_type())}, 1);
  v_cache = at::cat({v_cache, w_v(x_t).unsqueeze(1).to(v_cache.scalar_type())}, 1);
  const int64_t t = a_cache.size(1);
  // Closed form at the newest position: H = sum_d a_d E_{t-1-d} V_{t-1-d}, U likewise.
  const at::Tensor lag = state.tensors[2].narrow(0, 0, t).flip(0);  // row j: distance t-1-j
  const at::Tensor m = std::get<0>(a_cache.max(1, true));
  const at::Tensor e = at::exp(a_cache - m) * lag;  // [B, t, D]
  const at::Tensor h = (e * v_cache).sum(1), u = e.sum(1);
  ++state.pos;
  return w_o(h / u);
}

}  // namespace seqmix::nn
