#include "seqmix/nn/self_attention.h"

#include <cmath>
#include <stdexcept>

namespace seqmix::nn {

SelfAttentionImpl::SelfAttentionImpl(SelfAttentionOptions options_)
    : Mixer<SelfAttentionImpl>("SelfAttention"), options(std::move(options_)) {
  reset();
}

void SelfAttentionImpl::reset() {
  const int64_t D = options.d_model(), H = options.n_heads();
  TORCH_CHECK(H > 0 && D % H == 0, "SelfAttention: n_heads (", H, ") must divide d_model (", D,
              ")");
  qkv = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(D, 3 * D).bias(options.bias())));
  out = register_module("out",
                        torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(options.bias())));
  reset_parameters();
}

void SelfAttentionImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double D = static_cast<double>(options.d_model());
  const double N = static_cast<double>(options.n_layers());
  qkv->weight.normal_(0.0, 1.0 / std::sqrt(D));
  if (options.bias()) qkv->bias.zero_();
  out->weight.normal_(0.0, std::sqrt(std::max(1.0 - 2.0 / D, 1e-3) / (2.0 * N * D)));
  if (options.bias()) out->bias.zero_();
}

void SelfAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::SelfAttention(d_model=" << options.d_model()
         << ", n_heads=" << options.n_heads() << ", causal=" << options.causal() << ")";
}

at::Tensor SelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  const int64_t D = options.d_model(), H = options.n_heads(), dh = D / H;
  TORCH_CHECK(x.dim() == 3 && x.size(2) == D, "SelfAttention: x must be [B, L, ", D, "], got ",
              x.sizes());
  const int64_t B = x.size(0), L = x.size(1);
  auto parts = qkv(x).view({B, L, 3, H, dh}).permute({2, 0, 3, 1, 4});  // [3, B, H, L, dh]
  at::Tensor q = parts[0], k = parts[1], v = parts[2];
  const double dropout = is_training() ? options.dropout() : 0.0;
  // Without a key-padding mask, the kernel backend is PyTorch's own SDPA (its CPU
  // flash-attention kernel, also O(L) memory): 1.6x faster than seqmix's kernel forward +
  // backward at B = 4, 8 heads of 64, L = 1024 (docs/BENCHMARKS.md, "Against PyTorch 2.11").
  // With a mask, seqmix's kernel runs: it gives padded rows 0 where SDPA gives NaN.
  const bool sdpa = !mask.defined() && (options.use_sdpa() ||
                                        (options.backend() == ops::Backend::kernel && dropout == 0));
  if (sdpa) {
    const double p = dropout;
    at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/std::nullopt, p,
                                                    /*is_causal=*/options.causal());
    return out(y.transpose(1, 2).reshape({B, L, D}));
  }
  if (mask.defined())
    TORCH_CHECK(mask.scalar_type() == at::kBool && mask.dim() == 2 && mask.size(0) == B &&
                    mask.size(1) == L,
                "SelfAttention: mask must be bool [", B, ", ", L, "], got ", mask.sizes());
  const ops::Direction direction =
      options.causal() ? ops::Direction::causal : ops::Direction::bidirectional;
  at::Tensor heads = options.backend() == ops::Backend::kernel && dropout == 0
                         ? ops::attention_kernel(q, k, v, mask, direction)
                         : ops::attention_reference(q, k, v, mask, direction, dropout);
  at::Tensor y = heads.transpose(1, 2).reshape({B, L, D});
  y = out(y);
  if (mask.defined()) y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0);
  return y;
}

MixerState SelfAttentionImpl::init_state(int64_t batch) const {
  if (!options.causal())
    throw std::logic_error("SelfAttention: a bidirectional layer cannot decode incrementally");
  const int64_t H = options.n_heads(), dh = options.d_model() / H;
  const auto opts = qkv->weight.options().requires_grad(false);
  MixerState s;
  s.tensors = {torch::empty({batch, H, 0, dh}, opts), torch::empty({batch, H, 0, dh}, opts)};
  return s;
}

at::Tensor SelfAttentionImpl::step(const at::Tensor& x_t, MixerState& state) {
  const int64_t D = options.d_model(), H = options.n_heads(), dh = D / H;
  TORCH_CHECK(x_t.dim() == 2 && x_t.size(1) == D, "SelfAttention::step: x_t must be [B, ", D,
              "], got ", x_t.sizes());
  TORCH_CHECK(state.tensors.size() == 2, "SelfAttention::step: state was not made by init_state");
  const int64_t B = x_t.size(0);
  auto parts = qkv(x_t).view({B, 3, H, 1, dh});
  at::Tensor q = parts.select(1, 0);                                      // [B, H, 1, dh]
  // The caches keep the state's dtype (float32) whatever the projection returned (bfloat16
  // under train.precision = bf16).
  const auto cache_type = state.tensors[0].scalar_type();
  state.tensors[0] = at::cat({state.tensors[0], parts.select(1, 1).to(cache_type)}, 2);  // [B, H, t, dh]
  state.tensors[1] = at::cat({state.tensors[1], parts.select(1, 2).to(cache_type)}, 2);
  at::Tensor scores =
      at::matmul(q, state.tensors[0].transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
  at::Tensor y = at::matmul(at::softmax(scores, -1), state.tensors[1]);  // [B, H, 1, dh]
  ++state.pos;
  return out(y.reshape({B, D}));
}

}  // namespace seqmix::nn
