#pragma once
/// @file extractor_conv.h
/// The "extraction" part of the Extractor (extractor, Sec. 5, eq. 18): a causal convolution
/// over the sequence whose kernel is one learned D x D matrix per relative lag,
///   ext_i = sum_{j=1..i} x_j W_{i-j+1}     (1-based, as in the paper)
///   ext[i] = sum_{k=0..i} x[i - k] W[k]    (0-based: lag k uses W[k] = W_{k+1})
/// with x_j a row vector, so each lag applies x @ W[k].
///
/// Legend: B batch, t sequence length, D channels, l number of lag matrices (the context
/// window); t <= l, so every lag of a sequence has its own matrix.
#include <ATen/ATen.h>

#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::ops {

/// Literal eq. 18: for each lag k < t, ext[:, k:] += x[:, :t-k] @ W[k]. O(t^2 D^2) work, t
/// matrix products; autograd through ATen.
/// @param x  [B, t, D], float32 or float64, or bfloat16 (mixed precision, common.h).
/// @param w  [l, D, D] lag matrices, same dtype, l >= t.
/// @return   ext [B, t, D].
/// @throws std::invalid_argument if shapes or dtypes disagree or t > l (naming both).
at::Tensor extractor_conv_reference(const at::Tensor& x, const at::Tensor& w);

/// Eq. 18 by the convolution theorem: x and W[0:t] are zero-padded to n >= 2t - 1 along the
/// sequence/lag axis and transformed with rfft; at each of the n/2 + 1 frequencies the
/// output spectrum is X_f [B, D] @ W_f [D, D] (one batched complex matrix product); irfft
/// and the first t positions give ext. O(t log t B D + t B D^2) work instead of O(t^2 B D^2).
/// Gradients flow through ATen's FFT and matmul derivatives. Same contract as the reference;
/// results agree to rounding (float32: ~1e-6 relative).
at::Tensor extractor_conv_kernel(const at::Tensor& x, const at::Tensor& w);

/// Dispatches: Backend::kernel (the default) runs extractor_conv_kernel, Backend::reference the
/// literal per-lag extractor_conv_reference.
///
/// Example:
///   at::Tensor x = torch::randn({2, 50, 16});        // [B, t, D]
///   at::Tensor w = 0.1 * torch::randn({64, 16, 16});  // l = 64 >= t lag matrices
///   at::Tensor ext = seqmix::ops::extractor_conv(x, w);  // [2, 50, 16]
///   at::Tensor last = seqmix::ops::extractor_conv_last(x, w);  // ext[:, 49], for decoding
at::Tensor extractor_conv(const at::Tensor& x, const at::Tensor& w,
                          Backend backend = Backend::kernel);

/// One decoding step of eq. 18: the newest position's output given the inputs so far.
/// @param history  [B, t, D]: x[0 .. t-1], the last row being the current token, t <= l.
/// @param w        [l, D, D].
/// @return         ext[t - 1] [B, D] = sum_k history[:, t-1-k] @ W[k]; O(t D^2) per sequence.
at::Tensor extractor_conv_last(const at::Tensor& history, const at::Tensor& w);

}  // namespace seqmix::ops
