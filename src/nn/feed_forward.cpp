#include "seqmix/nn/feed_forward.h"

#include <cmath>
#include <stdexcept>

namespace seqmix::nn {

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "leaky_relu") return Activation::leaky_relu;
  if (name == "relu") return Activation::relu;
  throw std::invalid_argument("unknown activation '" + name +
                              "' (expected gelu, leaky_relu or relu)");
}

std::string to_string(Activation a) {
  switch (a) {
    case Activation::gelu:
      return "gelu";
    case Activation::leaky_relu:
      return "leaky_relu";
    case Activation::relu:
      return "relu";
  }
  return "?";
}

FeedForwardImpl::FeedForwardImpl(FeedForwardOptions options_)
    : torch::nn::Cloneable<FeedForwardImpl>("FeedForward"), options(std::move(options_)) {
  reset();
}

void FeedForwardImpl::reset() {
  w_1 = register_module("w_1", torch::nn::Linear(torch::nn::LinearOptions(options.d_model(),
                                                                           options.d_ff())
                                                     .bias(options.bias())));
  w_2 = register_module("w_2", torch::nn::Linear(torch::nn::LinearOptions(options.d_ff(),
                                                                           options.d_model())
                                                     .bias(options.bias())));
  reset_parameters();
}

void FeedForwardImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double D = static_cast<double>(options.d_model());
  const double F = static_cast<double>(options.d_ff());
  const double N = static_cast<double>(options.n_layers());
  w_1->weight.normal_(0.0, 1.0 / std::sqrt(D));
  if (options.bias()) w_1->bias.zero_();
  w_2->weight.normal_(0.0, 1.7047 * std::sqrt(std::max(1.0 - 2.0 / D, 1e-3) / (2.0 * N * F)));
  if (options.bias()) w_2->bias.zero_();
}

void FeedForwardImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::FeedForward(d_model=" << options.d_model() << ", d_ff=" << options.d_ff()
         << ", activation=" << to_string(options.activation()) << ")";
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  at::Tensor h = w_1(x);
  switch (options.activation()) {
    case Activation::gelu:
      h = at::gelu(h);
      break;
    case Activation::leaky_relu:
      h = at::leaky_relu(h, 0.01);
      break;
    case Activation::relu:
      h = at::relu(h);
      break;
  }
  if (options.dropout() > 0 && is_training()) h = at::dropout(h, options.dropout(), true);
  return w_2(h);
}

}  // namespace seqmix::nn
