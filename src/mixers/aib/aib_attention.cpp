#include "seqmix/nn/aib_attention.h"

#include <torch/nn/init.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace seqmix::nn {

AIBAttentionImpl::AIBAttentionImpl(AIBAttentionOptions options_)
    : Mixer<AIBAttentionImpl>("AIBAttention"), options(std::move(options_)) {
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
  // The per-distance weights a_d for every distance this layer can see, computed once and
  // stored reversed (row j: distance max_len - 1 - j), so that the rows a step needs, the
  // distances t-1 .. 0 of the positions 0 .. t-1, are one contiguous block at the end.
  const at::Tensor lag =
      ops::aib_lag_weights(ops::aib_level_weights(w, options.weights()), options.max_len())
          .flip(0)
          .contiguous();
  const int64_t D = options.d_model();
  s.tensors = {torch::empty({batch, 0, D}, opts), torch::empty({batch, 0, D}, opts), lag,
               torch::full({batch, 1, D}, -std::numeric_limits<double>::infinity(), opts)};
  return s;
}

at::Tensor AIBAttentionImpl::step(const at::Tensor& x_t, MixerState& state) {
  TORCH_CHECK(x_t.dim() == 2 && x_t.size(1) == options.d_model(),
              "AIBAttention::step: x_t must be [B, ", options.d_model(), "], got ", x_t.sizes());
  TORCH_CHECK(state.tensors.size() == 4, "AIBAttention::step: state was not made by init_state");
  TORCH_CHECK(state.pos < options.max_len(), "AIBAttention::step: position ", state.pos,
              " reaches max_len ", options.max_len());
  at::Tensor& ev_cache = state.tensors[0];  // [B, t, D]: E_j V_j, E_j = exp(A_j - m)
  at::Tensor& e_cache = state.tensors[1];   // [B, t, D]: E_j
  at::Tensor& m = state.tensors[3];         // [B, 1, D]: the largest A_j so far
  // The caches stay float32 when the projections return bfloat16 (train.precision = bf16).
  const auto type = e_cache.scalar_type();
  const at::Tensor a = w_a(x_t).unsqueeze(1).to(type), v = w_v(x_t).unsqueeze(1).to(type);
  // Exponentials relative to the running maximum: each A_j is exponentiated once, and the
  // cache is rescaled only in the steps where some channel's maximum grows (then by
  // exp(m_old - m_new) <= 1, so nothing overflows for any |A|).
  const at::Tensor m_new = at::maximum(m, a);
  if (state.pos > 0 && at::any(m_new > m).item<bool>()) {
    const at::Tensor scale = at::exp(m - m_new);
    ev_cache.mul_(scale);
    e_cache.mul_(scale);
  }
  m = m_new;
  const at::Tensor e = at::exp(a - m);
  ev_cache = at::cat({ev_cache, e * v}, 1);
  e_cache = at::cat({e_cache, e}, 1);
  const int64_t t = e_cache.size(1);
  // Closed form at the newest position: H = sum_j a_{t-1-j} E_j V_j, U = sum_j a_{t-1-j} E_j.
  const at::Tensor& lag_rev = state.tensors[2];
  const at::Tensor lag = lag_rev.narrow(0, lag_rev.size(0) - t, t);  // row j: distance t-1-j
  const at::Tensor h = (ev_cache * lag).sum(1), u = (e_cache * lag).sum(1);
  ++state.pos;
  return w_o(h / u);
}

}  // namespace seqmix::nn
