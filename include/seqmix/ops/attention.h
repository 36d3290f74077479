#pragma once
/// @file attention.h
/// Scaled dot-product softmax attention (Vaswani et al. 2017, eq. 1), the core of the
/// Transformer baseline and of Weird-Net's self-attention layers:
///   O_h = softmax(Q_h K_h^T / sqrt(d_head) + M) V_h
/// with M = -inf where a key is padding (key_mask false) or, if causal, in the future
/// (key j > query i), and 0 elsewhere.
///
/// Legend: B batch, H heads, L sequence length, d_head channels per head.
///
/// Contract shared by every implementation: a query row that sees no key (every key it may
/// see is padding) outputs 0 and passes no gradient, never NaN. Outputs at padded query
/// positions are computed like any other row; the layer zeroes them.
#include <ATen/ATen.h>

#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::ops {

/// Literal eq. 1 in ATen ops: the [B, H, L, L] scores, a masked fill, softmax, and a second
/// matrix product; autograd through ATen. O(B H L^2) memory: the test oracle.
/// @param q, k, v   [B, H, L, d_head], float32 or float64, one dtype; or bfloat16 (mixed
///                  precision, common.h).
/// @param key_mask  [B, L] bool (true = valid key) or undefined (all valid).
/// @param direction causal: query i sees keys j <= i only; bidirectional: every key.
/// @param dropout   probability of zeroing an attention probability (inverted dropout, as
///                  torch.nn.MultiheadAttention); 0 in evaluation.
/// @return O [B, H, L, d_head].
/// @throws c10::Error naming the argument on a shape or dtype mismatch.
at::Tensor attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_mask, Direction direction,
                               double dropout = 0.0);

/// The fused CPU kernel (flash-attention's scheme, Dao et al. 2022, on the CPU): per
/// (sequence, head), query rows in blocks whose scores against the keys they may see are
/// computed, masked, softmaxed and multiplied by V while in cache; only O and the per-row
/// log-sum-exp [B, H, L] are stored. Backward (a torch::autograd::Function) recomputes the
/// probabilities from the log-sum-exp. O(B H L d_head) memory instead of O(B H L^2).
/// No dropout on the probabilities (the layer falls back to the reference for that). Under
/// create_graph=True (second derivatives) backward differentiates attention_reference at the
/// saved inputs instead, so gradients of gradients are exact (O(L^2) memory there). A query
/// with a non-finite entry gives NaN in its row, as the reference does.
/// bfloat16 q, k, v on a CPU with AVX-512 BF16: the score products Q K^T and dO V^T run as
/// bfloat16 dot products (vdpbf16ps), which multiply exactly and sum in float32, so the
/// result is still a float32 computation rounded once (only the order of the sums
/// differs); every other product, the softmax and the outputs stay float32. Inputs below
/// the smallest normal float (about 1.2e-38) count as 0 in those two products (vdpbf16ps
/// treats denormals as zero).
/// Same contract as attention_reference.
at::Tensor attention_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& key_mask, Direction direction);

/// The op the layers call: the fused kernel (Backend::kernel, the default) or the reference
/// (without dropout). Same contract as attention_reference.
///
/// Example:
///   namespace so = seqmix::ops;
///   at::Tensor q = torch::randn({2, 4, 100, 16});  // [B, H, L, d_head]
///   at::Tensor k = torch::randn({2, 4, 100, 16}), v = torch::randn({2, 4, 100, 16});
///   at::Tensor o = so::attention(q, k, v, /*key_mask=*/at::Tensor(), so::Direction::causal);
///   at::Tensor o_ref = so::attention(q, k, v, at::Tensor(), so::Direction::causal,
///                                    so::Backend::reference);  // equal up to rounding
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& key_mask, Direction direction,
                     Backend backend = Backend::kernel);

}  // namespace seqmix::ops
