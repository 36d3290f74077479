#pragma once
// Fused softmax attention kernels (forward and backward) on plain pointers; see
// include/seqmix/ops/attention.h for the contract.
//
// Layout: q, k, v, o and their gradients are [BH, L, dh] contiguous (BH = B * H, item
// bh = b * H + h); lse is [BH, L]; key_mask is [B, L] (1 = valid) or null.
//
// A work item is one (sequence, head). Its query rows are taken in blocks of `block_rows`;
// a block's scores against every key it may see, [block_rows, L], are computed, softmaxed
// and used while they are in cache, so no [L, L] tensor is ever stored. Backward recomputes
// the probabilities from the saved log-sum-exp (flash-attention's scheme, one pass over the
// query blocks with dK and dV accumulated per item).
#include <cstdint>

namespace seqmix::ops::cpu {

template <typename T>
struct AttentionParams {
  const T* q = nullptr;               // [BH, L, dh]
  const T* k = nullptr;               // [BH, L, dh]
  const T* v = nullptr;               // [BH, L, dh]
  const uint8_t* key_mask = nullptr;  // [B, L] or null
  T* o = nullptr;                     // [BH, L, dh] output (forward), input (backward)
  T* lse = nullptr;                   // [BH, L] log-sum-exp of each row's scaled scores;
                                      // +inf where a row sees no key (its output is 0)
  const T* grad_o = nullptr;          // [BH, L, dh] (backward)
  T* grad_q = nullptr;                // [BH, L, dh]
  T* grad_k = nullptr;                // [BH, L, dh]
  T* grad_v = nullptr;                // [BH, L, dh]
  int64_t BH = 0, H = 1, L = 0, dh = 0;
  T scale = 1;
  bool causal = false;
  // Mixed precision (T = float only): an input given here, as the raw bits of bfloat16
  // [BH, L, dh], replaces its float pointer above; it is widened as the item copies it into
  // scratch. Outputs stay float (the caller rounds them), and so does o, which backward reads
  // for its row term dO . O.
  struct {
    const uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *grad_o = nullptr;
  } bf16;
};

/// Elements of T one range of items needs as scratch (the caller allocates it: the per-ISA
/// files use no std:: containers, whose out-of-line copies the linker could share between
/// instruction sets).
template <typename T>
int64_t attention_scratch_elems(const AttentionParams<T>& p, bool backward);

/// Runs items [begin, end) of the forward pass (writes o and lse); `scratch` holds
/// attention_scratch_elems(p, false) elements.
template <typename T>
void attention_forward(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch);

/// Runs items [begin, end) of the backward pass (writes grad_q, grad_k, grad_v); `scratch`
/// holds attention_scratch_elems(p, true) elements.
template <typename T>
void attention_backward(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch);

/// Tests: run the baseline-ISA build even on a CPU with AVX-512.
void attention_force_base_isa(bool base);

/// Tests and benchmarks: compute every product in float32 even for bfloat16 inputs on a CPU
/// with AVX-512 BF16 (whose build otherwise computes Q K^T and dO V^T in bfloat16).
void attention_force_float_products(bool on);

}  // namespace seqmix::ops::cpu
