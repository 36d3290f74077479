#pragma once
/// @file op_cases.h
/// The op-case registry (ggml's test-backend-ops is the model): every op configuration the
/// tests check and the benchmarks time, in one list. A case names a real configuration (op,
/// shape, direction, weights mode, padding, ...), makes its inputs for a dtype and a seed,
/// and says which reference and which kernel it compares: two callables from the same inputs
/// to the op's output. tests/support/op_check.h checks every case the same way (forward,
/// every gradient, float64 finite differences, float32 accuracy relative to the reference,
/// padded rows); `seqmix bench ops` times the cases marked `benchmarked` at its own shapes.
///
/// Adding an op: one family of cases in its mixer's folder, src/mixers/<name>/op_cases.cpp (a
/// function making inputs, one mapping them to the registered op's arguments, the
/// configurations that matter); the tests (C++, and torch.library.opcheck from pytest) and
/// the benchmark pick it up.
///
/// Example:
/// @code
///   for (const ops::OpCase& c : ops::op_cases("aib_scan")) {
///     ops::OpInputs in = c.make_inputs(at::kDouble, 7);
///     at::Tensor diff = c.kernel(in.values(), in.mask) - c.reference(in.values(), in.mask);
///   }
/// @endcode
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "seqmix/ops/common.h"

namespace seqmix::ops {

/// One input of an op case: an activation (with a sequence axis) or a parameter.
struct OpInput {
  std::string name;           ///< as the op's documentation names it ("a", "log_lambda", ...)
  at::Tensor value;           ///< float32 or float64, as asked
  bool requires_grad = true;  ///< false: this configuration does not use it (no gradient)
  int64_t seq_dim = -1;       ///< the sequence axis of an activation; -1 for a parameter
  /// With a mask: gradient entries at padded positions are exactly 0 even when every output
  /// (padded ones too) receives a gradient, i.e. padded entries influence no output at all.
  bool padded_grad_zero = false;
};

/// The inputs of one case: tensors in the order the callables take them, and the mask.
struct OpInputs {
  std::vector<OpInput> inputs;
  at::Tensor mask;  ///< [B, L] bool, true = valid position, or undefined (no padding)

  /// The tensors alone, in order.
  std::vector<at::Tensor> values() const;
  /// The same inputs converted to `dtype` (the mask unchanged).
  OpInputs to(at::ScalarType dtype) const;
};

/// An implementation of the op: the output from the inputs (OpInputs::values()) and the mask.
using OpFn = std::function<at::Tensor(const std::vector<at::Tensor>&, const at::Tensor& mask)>;

/// The arguments of the registered op for the inputs (OpInputs::values()) and the mask, in
/// its schema's order with every option spelled out: what the dispatcher (and
/// torch.library.opcheck) is called with. Tensors derived from the inputs (CES's q and c)
/// keep their graph back to them.
using OpArgsFn =
    std::function<std::vector<c10::IValue>(const std::vector<at::Tensor>&, const at::Tensor& mask)>;

/// One configuration of one op.
struct OpCase {
  std::string op;               ///< "aib_scan" | "ces_scan" | "attention" | "extractor_conv"
  std::string config;           ///< readable configuration, e.g. "causal_prefix_exp_L17_masked"
  int64_t B = 0, L = 0, D = 0;  ///< batch, sequence length, channels (attention: H * d_head)
  Direction direction = Direction::causal;
  /// The op's own option this case sets, as its parser spells it: the AIB weights mode
  /// (parse_aib_weights), "normalize" for CES with the LRU-style normalisation; else empty.
  std::string variant;
  bool masked = false;  ///< the inputs carry a padding mask with padded positions
  /// Outputs at padded positions are exactly 0 (AIB, CES); otherwise they are computed like
  /// any other position and the layer discards them (attention).
  bool zero_padded_outputs = false;
  int64_t out_seq_dim = 1;   ///< the output's sequence axis
  bool gradcheck = true;     ///< small enough for float64 finite differences
  bool benchmarked = false;  ///< the op's configuration that `seqmix bench ops` times
  /// Benchmarked case: the tensor bytes one forward + backward of `backend` at [B, L, D]
  /// needs, roughly (calibrated on measured peaks, docs/BENCHMARKS.md), so that `seqmix bench
  /// ops` skips a shape that cannot fit instead of failing. Unset: 16 float32 [B, L, D].
  std::function<int64_t(Backend backend, int64_t B, int64_t L, int64_t D)> bench_bytes;

  /// Inputs for `dtype` (float32 or float64) drawn from `seed` (a private generator: the
  /// global one is left alone). The same seed gives the same inputs, and the same values in
  /// both dtypes (every value is float32-representable) with the same mask.
  std::function<OpInputs(at::ScalarType dtype, uint64_t seed)> make_inputs;
  /// The arguments of `seqmix::<op>` and `seqmix::<op>_reference` (one schema).
  OpArgsFn op_args;
  OpFn reference;  ///< seqmix::<op>_reference called through the dispatcher with op_args
  OpFn kernel;     ///< seqmix::<op> (the optimised implementation), likewise
  /// The same configuration at another shape (benchmarks). Attention keeps its head width
  /// (D must be a multiple of it), the Extractor uses L lag matrices.
  /// @throws std::invalid_argument if the shape does not fit the configuration.
  std::function<OpCase(int64_t B, int64_t L, int64_t D)> at_shape;

  /// op + "_" + config: a unique name made of letters, digits and '_' (a gtest name).
  std::string name() const { return op + "_" + config; }
  /// The implementation of `backend`.
  const OpFn& implementation(Backend backend) const {
    return backend == Backend::kernel ? kernel : reference;
  }
};

/// Every registered case, grouped by op (aib_scan, ces_scan, attention, extractor_conv).
/// Shapes are test-sized (the longest are L = 16384 with D = 20 and L = 4096); each op has
/// exactly one case with `benchmarked` set.
// Appends every built-in mixer's op cases, in SEQMIX_MIXERS order: defined by the generated
// file that calls `void seqmix::mixers::<folder>::add_op_cases(cases)` of each folder.
void add_builtin_op_cases(std::vector<OpCase>& cases);

const std::vector<OpCase>& op_cases();

/// The cases of one op, in registry order. @throws std::invalid_argument for an unknown op
/// (the message lists the ops).
std::vector<OpCase> op_cases(const std::string& op);

/// The ops of the registry, in order.
std::vector<std::string> op_names();

}  // namespace seqmix::ops
