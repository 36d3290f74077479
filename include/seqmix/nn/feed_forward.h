#pragma once
/// @file feed_forward.h
/// Position-wise feed-forward network FFN(X) = act(X W_1 + b_1) W_2 + b_2
/// (weird-net eq. 62 with GELU; moss-aib-attention eqs. 53-54 with Leaky-ReLU 0.01).
/// Shapes: [..., D] -> [..., D], inner width d_ff.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace seqmix::nn {

enum class Activation { gelu, leaky_relu, relu };
/// Parses "gelu" | "leaky_relu" | "relu". @throws std::invalid_argument naming the value.
Activation parse_activation(const std::string& name);
std::string to_string(Activation a);

struct FeedForwardOptions {
  FeedForwardOptions(int64_t d_model, int64_t d_ff) : d_model_(d_model), d_ff_(d_ff) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(Activation, activation) = Activation::gelu;
  TORCH_ARG(double, dropout) = 0.0;
  /// Biases b_1, b_2 (the Extractor paper disables all biases).
  TORCH_ARG(bool, bias) = true;
  /// Number of stacked layers N, for the W_2 init std.
  TORCH_ARG(int64_t, n_layers) = 1;
};

/// Init (weird-net Sec. III.G): W_1 ~ N(0, 1/D), W_2 ~ N(0, 1.7047^2 (1 - 2/D) / (2 N d_ff)),
/// biases 0.
///
/// Example:
///   seqmix::nn::FeedForward ffn(seqmix::nn::FeedForwardOptions(/*d_model=*/64, /*d_ff=*/256)
///                                   .activation(seqmix::nn::Activation::relu)
///                                   .bias(false));
///   at::Tensor y = ffn(torch::randn({2, 100, 64}));  // [2, 100, 64]
class FeedForwardImpl : public torch::nn::Cloneable<FeedForwardImpl> {
 public:
  explicit FeedForwardImpl(FeedForwardOptions options);
  /// (Re)creates w_1 and w_2 from the options and initialises them; clone() relies on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  /// x [..., D] -> [..., D].
  at::Tensor forward(const at::Tensor& x);

  FeedForwardOptions options;
  torch::nn::Linear w_1{nullptr}, w_2{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace seqmix::nn
