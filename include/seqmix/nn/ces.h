#pragma once
/// @file ces.h
/// Complex exponential smoothing as a layer, and the ETSMLP mixer built around it
/// (etsmlp, Sec. 3; the authors' code PKUAI-LINGroup/ETSMLP, module/smlp_module.py: CETS and
/// SMLP_module; the paper's open points and the choices made are below).
///   CES:    o = CES(x) + shortcut(x)                        eqs. 10, 13
///   ESMLP:  Z = W_2 ReLU(CES(W_1 X))  [ * sigmoid(W_g X) ]   Sec. 3.2 (gate: ESMLP-Gate)
/// The block around ESMLP (norm -> ESMLP -> dropout -> + x, no separate FFN) is a
/// nn::Block built without an FFN: make_esmlp_block.
/// Legend: B batch, L sequence length, D = d_model, H hidden features (channels of the CES).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "seqmix/nn/block.h"
#include "seqmix/nn/mixer.h"
#include "seqmix/ops/ces_scan.h"

namespace seqmix::nn {

/// The shortcut of eq. 13: the authors' code adds omega * x; the paper writes
/// sigmoid(omega) * x (both supported; the default is the code's).
enum class CESShortcut { omega, sigmoid, none };
/// Parses "omega" | "sigmoid" | "none". @throws std::invalid_argument naming the value.
CESShortcut parse_ces_shortcut(const std::string& name);
std::string to_string(CESShortcut s);

struct CESOptions {
  explicit CESOptions(int64_t channels) : channels_(channels) {}
  /// H: channels smoothed independently.
  TORCH_ARG(int64_t, channels);
  /// Second parameter set for the suffix (eq. 14); an encoder layer. Cannot decode.
  TORCH_ARG(bool, bidirectional) = false;
  /// Ring initialisation of lambda: |lambda| uniform on the ring r_min <= |z| <= r_max (by
  /// area: |lambda|^2 ~ U(r_min^2, r_max^2)), phase ~ U(0, max_phase). Table 4's best ring.
  TORCH_ARG(double, r_min) = 0.1;
  TORCH_ARG(double, r_max) = 0.9;
  TORCH_ARG(double, max_phase) = 6.283185307179586;
  /// alpha = dt (1 + i) at init, dt log-uniform in [dt_min, dt_max].
  TORCH_ARG(double, dt_min) = 1e-3;
  TORCH_ARG(double, dt_max) = 0.1;
  /// The constraint |mu| <= max_lambda (eq. 12; 0.9999 in all the paper's runs).
  TORCH_ARG(double, max_lambda) = 0.9999;
  TORCH_ARG(CESShortcut, shortcut) = CESShortcut::omega;
  /// Multiply the kernel by sqrt(1 - |mu|^2), the LRU-style normalisation the paper's
  /// appendix B adds "for the sake of performance".
  TORCH_ARG(bool, normalize) = false;
  /// kernel (the recurrence, default) or the authors' FFT formulation.
  TORCH_ARG(ops::Backend, backend) = ops::Backend::kernel;
  /// The ablations of etsmlp Table 3. alpha = false: no damping exponent, mu = f(lambda)
  /// (alpha fixed at 1, no log_alpha parameter). beta = false: no input factor, c = 1 - mu
  /// (beta fixed at 1, no log_beta). real = true: lambda, alpha and beta real ("Real"): each
  /// parameter keeps only its real part, [C, 1]; lambda is then in (0, 1) and its phase 0
  /// (to float rounding: lambda' has imaginary part pi, whose sine is ~1e-16 in float64).
  TORCH_ARG(bool, alpha) = true;
  TORCH_ARG(bool, beta) = true;
  TORCH_ARG(bool, real) = false;
};

/// Parameters (C = H, or 2 H when bidirectional; complex numbers as [C, 2]):
/// `log_lambda` lambda' = log log lambda, `log_alpha` (alpha = e^{a0} + i e^{a1}),
/// `log_beta` (beta = exp(b0 + i b1)), each [C, 2] ([C, 1] with real; log_alpha / log_beta
/// undefined without alpha / beta); `omega` [H] (unless shortcut none).
/// Init (the authors' "normal" version): ring lambda as above, log_alpha = log dt in both
/// parts, log_beta ~ N(0, 0.2^2), omega ~ N(0, 1).
/// Decoding state (causal only): s [B, H, 2], the complex smoothing state; a step is O(H).
///
/// Example:
///   seqmix::nn::CES ces(seqmix::nn::CESOptions(/*channels=*/32).r_min(0.5).normalize(true));
///   at::Tensor y = ces(torch::randn({2, 100, 32}));  // [2, 100, 32]
///   at::Tensor s = ces->init_state(2);
///   at::Tensor y0 = ces->step(torch::randn({2, 32}), s);  // [2, 32], updates s
class CESImpl : public torch::nn::Cloneable<CESImpl> {
 public:
  explicit CESImpl(CESOptions options);
  /// (Re)creates the parameters from the options and initialises them; clone() relies on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  /// mu, c and the constrained q from the parameters (differentiable).
  ops::CESCoefficients coefficients() const;
  /// x [B, L, H], mask [B, L] bool or undefined -> [B, L, H]. Padded inputs contribute
  /// nothing; a padded position's output is its shortcut term only.
  /// @throws std::invalid_argument if the last dimension is not H.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {});
  /// Zero state for `batch` sequences. @throws std::logic_error when bidirectional.
  at::Tensor init_state(int64_t batch) const;
  /// x_t [B, H] -> y_t [B, H], equal to forward's row at the state's position; updates s.
  at::Tensor step(const at::Tensor& x_t, at::Tensor& state);

  CESOptions options;
  at::Tensor log_lambda, log_alpha, log_beta, omega;

 private:
  at::Tensor shortcut(const at::Tensor& x) const;
};
TORCH_MODULE(CES);

struct ESMLPOptions {
  ESMLPOptions(int64_t d_model, int64_t d_hidden) : d_model_(d_model), d_hidden_(d_hidden) {}
  /// D: width of input and output.
  TORCH_ARG(int64_t, d_model);
  /// H: hidden features, the CES channels (Table 5's H).
  TORCH_ARG(int64_t, d_hidden);
  /// Causal (language modelling, decodes step by step) or bidirectional (the paper's LRA and
  /// NLU models).
  TORCH_ARG(bool, causal) = true;
  /// ESMLP-Gate: multiply the output by sigmoid(W_g X).
  TORCH_ARG(bool, gate) = false;
  /// Options of the CES inside (channels and direction are set from the above).
  TORCH_ARG(CESOptions, ces) = CESOptions(0);
};

/// Parameters: `in_proj` (Linear D -> H), `ces`, `out_proj` (Linear H -> D), `gate_proj`
/// (Linear D -> D) if gated; weights Xavier-uniform, biases 0 (the authors' reset).
/// Masked positions are zeroed after in_proj ("zero pads", as the code's masked_fill).
/// Decoding state: tensors {CES state [B, H, 2]}.
///
/// Example:
///   seqmix::nn::ESMLP esmlp(seqmix::nn::ESMLPOptions(/*d_model=*/64, /*d_hidden=*/128)
///                               .causal(false)
///                               .gate(true));  // ESMLP-Gate, bidirectional
///   at::Tensor y = esmlp(torch::randn({2, 100, 64}), at::Tensor());  // [2, 100, 64]
///   seqmix::nn::Block block = seqmix::nn::make_esmlp_block(esmlp->options);  // the layer
class ESMLPImpl : public Mixer<ESMLPImpl> {
 public:
  explicit ESMLPImpl(ESMLPOptions options);
  /// (Re)creates in_proj, ces, out_proj and gate_proj (if gated) and initialises them;
  /// clone() relies on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  /// x [B, L, D] (the block's normalised input), mask [B, L] bool or undefined -> [B, L, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override;
  MixerState init_state(int64_t batch) const override;
  at::Tensor step(const at::Tensor& x_t, MixerState& state) override;
  bool causal() const override { return options.causal(); }

  ESMLPOptions options;
  torch::nn::Linear in_proj{nullptr}, out_proj{nullptr}, gate_proj{nullptr};
  CES ces{nullptr};
};
TORCH_MODULE(ESMLP);

/// The ETSMLP block (etsmlp Fig. 2, the authors' SMLPEncoderLayer without its optional FFN):
/// x + dropout(ESMLP(norm(x))) (pre-norm, the default) or norm(x + dropout(ESMLP(x))).
/// @param norm_type "layer" or "batch" (Table 5's Norm column); `norm` false: none.
/// @throws std::invalid_argument for another norm type.
Block make_esmlp_block(const ESMLPOptions& options, const std::string& norm_type = "layer",
                       bool pre_norm = true, double dropout = 0.0, bool norm = true);

}  // namespace seqmix::nn
