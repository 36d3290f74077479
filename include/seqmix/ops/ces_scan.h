#pragma once
/// @file ces_scan.h
/// Complex exponential smoothing (CES), the sequence mixer of ETSMLP (etsmlp, Sec. 3.1,
/// eqs. 7-14; the authors' code PKUAI-LINGroup/ETSMLP, module/smlp_module.py, class CETS,
/// complex version "normal"; the choices are documented in nn/ces.h).
///
/// Legend: B batch, L sequence length, H channels; C = H (causal) or 2 H (bidirectional:
/// rows [0, H) are the forward parameters, rows [H, 2 H) the backward ones).
///
/// Per channel, with complex numbers stored as [.., 2] (real, imaginary):
///   lambda' = log log lambda                       (parameter log_lambda [C, 2], eq. 10-11)
///   alpha   = e^{a0} + i e^{a1}                    (parameter log_alpha [C, 2], dt at init)
///   beta    = exp(b0 + i b1)                       (parameter log_beta [C, 2])
///   q  = exp(lambda') * alpha,  mu = exp(q) = lambda^alpha
///   if |mu| > max_lambda:  Re q <- log(max_lambda)   (eq. 12; no gradient to Re q then, as
///                                                     in the authors' code)
///   c  = beta (1 - mu)  [* sqrt(1 - |mu|^2) with `normalize`, the LRU-style option]
/// Causal output (eq. 10):  y_t = sum_{n<=t} Re(c mu^(t-n)) x_n,
/// i.e. the complex recurrence s_t = mu s_{t-1} + x_t, y_t = Re(c s_t).
/// Bidirectional (eq. 14, the code's kernel layout): y_t adds
///   sum_{n>t} Re(c' mu'^(n-t-1)) x_n  with the backward parameters (mu', c'):
/// the backward kernel starts at lag 1, so the current token is weighted only once.
/// The shortcut (omega x or sigmoid(omega) x, eq. 13) is the module's (nn::CES), not the op's.
///
/// Masks: mask [B, L] bool (true = valid) or undefined. Padded inputs are zeroed first (as
/// the authors' code does) and outputs at padded positions are 0.
#include <ATen/ATen.h>

#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::ops {

/// The recurrence's per-channel coefficients, each [C, 2] (real, imaginary), differentiable
/// functions of the raw parameters: q (constrained), mu = exp(q), c (see the file comment).
struct CESCoefficients {
  at::Tensor q, mu, c;
};

/// Computes q, mu and c from the raw parameters (ATen ops; autograd flows to all three).
/// @param log_lambda, log_alpha, log_beta  [C, 2] float32 or float64.
/// @param max_lambda  bound on |mu| (the authors' 0.9999), in (0, 1].
/// @param normalize   multiply c by sqrt(1 - |mu|^2).
/// @throws c10::Error on a shape/dtype mismatch (names the argument) or max_lambda out of range.
CESCoefficients ces_coefficients(const at::Tensor& log_lambda, const at::Tensor& log_alpha,
                                 const at::Tensor& log_beta, double max_lambda, bool normalize);

/// Reference: the authors' formulation, literally. The Vandermonde kernel
/// K[n] = Re(c mu^n), n = 0 .. L-1 ([C, L]), (bidirectional: [K_fwd, 0 .. 0, flip(K_bwd)]
/// over 2 L), then a circular FFT convolution of length 2 L with the zero-padded input.
/// Reads coef.mu and coef.c (coef.q may be undefined).
/// O(B H L log L); autograd through ATen (complex FFTs).
/// Accuracy: an FFT convolution's rounding error is absolute, about eps log2(L) times
/// max|x| sum|K| over the whole (batch, channel), and it reaches every position, the causal
/// form's earlier ones included: one input 10^30 times the others moves earlier outputs by
/// ~10^22 in float32. Outputs far smaller than that bound are not exact here, and the causal
/// form is causal only to that rounding; the recurrence (ces_scan_kernel, exact to rounding
/// position by position, causal exactly) is the one to trust there.
/// @param x     [B, L, H] float32 or float64, or bfloat16 (mixed precision, common.h).
/// @param coef  from ces_coefficients, C = H or 2 H as `direction` requires.
/// @return y [B, L, H] (without shortcut).
/// @throws c10::Error on a shape/dtype mismatch (names the argument).
at::Tensor ces_scan_reference(const at::Tensor& x, const CESCoefficients& coef,
                              const at::Tensor& mask, Direction direction);

/// The op `seqmix::ces_scan` of PyTorch's dispatcher (torch.ops.seqmix.ces_scan), schema
///   ces_scan(Tensor x, Tensor mu, Tensor c, Tensor? mask=None, str direction="causal")
///       -> Tensor
/// with CPU, Autograd (backward: seqmix::_ces_scan_backward), Meta and AutocastCPU kernels
/// (src/mixers/ces/ces_scan.cpp); its reference is seqmix::ces_scan_reference (same schema).
/// The CPU kernel: the same output as a complex diagonal linear recurrence over L, vectorised
/// over channels (rows read contiguously), O(B H L). Backward (hand-written):
/// dL/dx by the transposed recurrence run in reverse,
/// dL/dmu and dL/dc by one forward pass that carries s_t and ds_t/dmu (no stored states;
/// parameter gradients summed in float64); under create_graph=True it differentiates
/// ces_scan_reference instead, so second derivatives are exact. Same contract as
/// ces_scan_reference.
at::Tensor ces_scan_kernel(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                           Direction direction);

/// The op the layers call: the recurrence (Backend::kernel, the default) or the FFT
/// reference. Same contract as ces_scan_reference.
///
/// Example:
///   namespace so = seqmix::ops;
///   const int64_t H = 32;  // channels; C = H rows of parameters for the causal form
///   at::Tensor log_lambda = torch::randn({H, 2}), log_beta = 0.2 * torch::randn({H, 2});
///   at::Tensor log_alpha = torch::full({H, 2}, std::log(0.01));  // alpha = dt (1 + i)
///   so::CESCoefficients coef = so::ces_coefficients(log_lambda, log_alpha, log_beta,
///                                                   /*max_lambda=*/0.9999, /*normalize=*/false);
///   at::Tensor y = so::ces_scan(torch::randn({2, 100, H}), coef, /*mask=*/at::Tensor(),
///                               so::Direction::causal);  // [2, 100, H]
at::Tensor ces_scan(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                    Direction direction, Backend backend = Backend::kernel);

}  // namespace seqmix::ops
