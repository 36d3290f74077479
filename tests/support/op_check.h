#pragma once
// Test support: the one checker every op case goes through (include/seqmix/ops/op_cases.h;
// docs/ARCHITECTURE.md, "Ops"). For a case it checks
//   1. float64: the kernel's output and every gradient (inputs and parameters) against the
//      reference's, within kFloat64Tolerance relative to the reference's scale;
//   2. float32 (flash-attention's rule): the kernel's distance from the float64 reference
//      (run on the same, float32-representable inputs) is at most twice the float32
//      reference's distance plus kFloat32Floor, for the output and every gradient;
//   3. padded rows, as the op's contract says: outputs at padded positions exactly 0 where
//      the op promises it; gradient entries at padded positions exactly 0 where the input
//      says so; padded entries changed to large values change no valid output; and, with
//      the output gradient zero at padded positions, no padded entry of any sequence input
//      receives gradient;
//   4. float64 central differences of the kernel's (and, unless asked not to, the
//      reference's) gradients when the case is small enough (OpCase::gradcheck);
//   5. bfloat16 activations with float32 parameters (mixed precision): the 2x rule against
//      the exact result rounded to bfloat16, dtypes of the output and gradients, padding;
// and that every output and gradient is finite.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "seqmix/ops/op_cases.h"
#include "support/gradcheck.h"
#include "support/tensor_error.h"

namespace seqmix::testing {

/// float64 kernel vs reference, relative to the reference's scale (rel_err). Both sides are
/// float64 computations of the same quantity by different algorithms (a scan against an
/// FFT, blocked against whole-row softmax), so this bounds accumulated rounding of sums over
/// up to 16384 positions; the registry's worst case is 1.5e-14 (attention at L = 4096).
constexpr double kFloat64Tolerance = 1e-12;

/// The one floor of the float32 2x rule, for every op, output and gradient, relative to the
/// float64 result's scale: about 16 float32 ulps (2^-23 = 1.2e-7). It only matters where the
/// float32 reference is itself (nearly) exact, on short sequences: the AIB scan's dA =
/// E (dL/dU + V dL/dH) cancels where O is close to V, and the kernel's log-depth adjoint sums
/// carry a few ulps more than the reference's into that difference. Largest excess over 2x
/// measured (SEQMIX_OP_CHECK_VERBOSE=1 tests/test_aib_scan): 8.0e-7 in the Release build,
/// 1.1e-6 in the -O1 sanitizer build (scripts/sanitize.sh), both dA of the bidirectional
/// scan at L = 3 on the fast path.
constexpr double kFloat32Floor = 2e-6;

/// The floor of the bfloat16 2x rule (check 5), relative to the float64 result's scale: one
/// bfloat16 ulp at the scale (2^-8). Rounding a result to bfloat16 moves it by up to half an
/// ulp, and a kernel's float32 arithmetic may put a value on the other side of a rounding
/// boundary than the exact result, a whole ulp of that entry.
constexpr double kBFloat16Floor = 1.0 / 256;

/// The inputs of check 5: activations (inputs with a sequence axis) as bfloat16, parameters
/// rounded to bfloat16 values but kept in float32, as autocast's float32 master weights are.
inline ops::OpInputs bf16_inputs(const ops::OpInputs& in32) {
  ops::OpInputs b = in32;
  for (auto& x : b.inputs) {
    const at::Tensor r = x.value.to(at::kBFloat16);
    x.value = x.seq_dim >= 0 ? r : r.to(at::kFloat);
  }
  return b;
}

struct OpCheckOptions {
  uint64_t seed = 7;
  /// Finite differences of the reference too, for L up to
  /// `reference_gradcheck_max_len`: the reference is autograd through plain ATen ops, whose
  /// formulation longer sequences do not exercise further, and it is the slow side.
  bool reference_gradcheck = true;
  int64_t reference_gradcheck_max_len = 1000;
};

/// One run of an implementation: the output and the gradient of sum(out * go) for every
/// input (zeros where the input does not influence the output; undefined where the input
/// is not differentiated).
struct OpRun {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

inline OpRun run_op(const ops::OpFn& f, const ops::OpInputs& in, const at::Tensor& go) {
  std::vector<at::Tensor> leaves, need;
  for (const auto& i : in.inputs) {
    leaves.push_back(i.value.detach().clone().requires_grad_(i.requires_grad));
    if (i.requires_grad) need.push_back(leaves.back());
  }
  OpRun r;
  at::Tensor out = f(leaves, in.mask);
  std::vector<at::Tensor> g;
  if (!need.empty())
    g = torch::autograd::grad({out}, need, {go}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
  r.out = out.detach();
  size_t j = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!in.inputs[i].requires_grad) {
      r.grads.emplace_back();
      continue;
    }
    const at::Tensor& gi = g[j++];
    r.grads.push_back(gi.defined() ? gi : at::zeros_like(leaves[i]));
  }
  return r;
}

/// `mask` [B, L] broadcast to `like`, whose axis 0 is the batch and `seq_dim` the sequence.
inline at::Tensor broadcast_mask(const at::Tensor& mask, const at::Tensor& like, int64_t seq_dim) {
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[0] = mask.size(0);
  shape[static_cast<size_t>(seq_dim)] = mask.size(1);
  return mask.view(shape).expand(like.sizes());
}

inline double max_at(const at::Tensor& x, const at::Tensor& where) {
  const at::Tensor s = x.masked_select(where);
  return s.numel() ? s.abs().max().item<double>() : 0.0;
}

// Probed entries per input: fewer for long sequences, where each probe costs more.
inline int64_t fd_probes(const ops::OpCase& c) { return c.L >= 1000 ? 16 : 32; }

inline std::vector<at::Tensor> fd_inputs(const ops::OpInputs& in) {
  std::vector<at::Tensor> x;
  for (const auto& i : in.inputs) x.push_back(i.value.detach().requires_grad_(i.requires_grad));
  return x;
}

inline bool op_check_verbose() {
  const char* v = std::getenv("SEQMIX_OP_CHECK_VERBOSE");
  return v && *v && std::string(v) != "0";
}

/// A build or path of the kernel that a test selects through a hook of its own (the AIB
/// kernel's exponent path, the attention kernel's baseline ISA): `select(true)` before the
/// kernel runs, `select(false)` after. The default is the kernel as it is.
struct KernelVariant {
  std::string name;
  std::function<void(bool)> select;
};

/// Runs checks 1-4 (see the file comment) on `c`, the kernel's part once per variant (the
/// reference's results are shared); failures are gtest failures naming the case, the
/// variant, the quantity (output or the input whose gradient) and both errors.
inline void check_op_case(const ops::OpCase& c, const OpCheckOptions& o = {},
                          const std::vector<KernelVariant>& variants = {{"", nullptr}}) {
  SCOPED_TRACE(c.name());
  at::manual_seed(static_cast<int64_t>(o.seed));
  const bool verbose = op_check_verbose();
  auto quantity = [&](const ops::OpInputs& in, size_t k) {
    return k == 0 ? std::string("output") : "d" + in.inputs[k - 1].name;
  };
  // Output first, then the gradients in input order (undefined where not differentiated).
  auto all = [](const OpRun& r) {
    std::vector<at::Tensor> v = {r.out};
    v.insert(v.end(), r.grads.begin(), r.grads.end());
    return v;
  };

  // The reference's side: float64 results, and float32 results with their float64 truth
  // (the float64 reference on the same float32-representable inputs).
  const ops::OpInputs in64 = c.make_inputs(at::kDouble, o.seed);
  const ops::OpInputs in32 = c.make_inputs(at::kFloat, o.seed);
  const at::Tensor& mask = in64.mask;
  ASSERT_EQ(mask.defined(), in32.mask.defined());
  if (mask.defined()) {
    ASSERT_TRUE(at::equal(mask, in32.mask)) << "one seed, one mask";
  }
  at::Tensor go64;
  {
    torch::NoGradGuard no_grad;
    go64 = at::randn_like(c.reference(in64.values(), mask));
  }
  const at::Tensor go32 = go64.to(at::kFloat);
  const OpRun r64 = run_op(c.reference, in64, go64);
  const OpRun truth = run_op(c.reference, in32.to(at::kDouble), go32.to(at::kDouble));
  const OpRun r32 = run_op(c.reference, in32, go32);
  const bool padded = mask.defined() && !mask.all().item<bool>();
  // A case named masked that pads nothing would skip every padding check below.
  EXPECT_EQ(padded, c.masked) << "the case's mask must pad at least one position";
  const at::Tensor pad_out =
      padded ? broadcast_mask(mask.logical_not(), r64.out, c.out_seq_dim) : at::Tensor();
  if (padded) {
    if (c.zero_padded_outputs) {
      EXPECT_EQ(max_at(r64.out, pad_out), 0.0) << "reference outputs at padded positions";
    }
    for (size_t i = 0; i < in64.inputs.size(); ++i) {
      const ops::OpInput& x = in64.inputs[i];
      if (!x.padded_grad_zero || !x.requires_grad) continue;
      EXPECT_EQ(max_at(r64.grads[i], broadcast_mask(mask.logical_not(), x.value, x.seq_dim)), 0.0)
          << "reference d" << x.name << " at padded positions";
    }
  }

  for (const KernelVariant& variant : variants) {
    SCOPED_TRACE(variant.name);
    if (variant.select) variant.select(true);
    // Deselects on every way out, failed assertions included.
    const std::shared_ptr<void> deselect(nullptr, [&](void*) {
      if (variant.select) variant.select(false);
    });
    // 1. float64: kernel against reference.
    const OpRun k64 = run_op(c.kernel, in64, go64);
    ASSERT_EQ(k64.out.sizes(), r64.out.sizes());
    {
      const auto kv = all(k64), rv = all(r64);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (!kv[i].defined()) continue;
        EXPECT_TRUE(at::isfinite(kv[i]).all().item<bool>()) << quantity(in64, i) << " (float64)";
        const double e = rel_err(kv[i], rv[i]);
        EXPECT_LE(e, kFloat64Tolerance) << quantity(in64, i) << ": float64 kernel vs reference";
        if (verbose)
          std::printf("[op_check] %s %s f64 %-12s %.3g\n", c.name().c_str(), variant.name.c_str(),
                      quantity(in64, i).c_str(), e);
      }
    }

    // 2. float32: the 2x rule against the float64 truth.
    const OpRun k32 = run_op(c.kernel, in32, go32);
    {
      const auto tv = all(truth), rv = all(r32), kv = all(k32);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (!kv[i].defined()) continue;
        EXPECT_TRUE(at::isfinite(kv[i]).all().item<bool>()) << quantity(in32, i) << " (float32)";
        const double ek = rel_err(kv[i], tv[i]), er = rel_err(rv[i], tv[i]);
        EXPECT_LE(ek, 2 * er + kFloat32Floor)
            << quantity(in32, i) << ": float32 kernel " << ek << " from the float64 result, "
            << "float32 reference " << er << " (2x rule, floor " << kFloat32Floor << ")";
        if (verbose)
          std::printf("[op_check] %s %s f32 %-12s kernel %.3g reference %.3g\n", c.name().c_str(),
                      variant.name.c_str(), quantity(in32, i).c_str(), ek, er);
      }
    }

    // 5. bfloat16 activations with float32 parameters (train.precision = bf16): every output
    //    and gradient finite, and within twice the distance of the bfloat16 reference from the
    //    float64 result, plus kBFloat16Floor. The bfloat16 reference is the exact result
    //    rounded to bfloat16 once: what an op that computes in float32 and stores bfloat16
    //    (as the kernels do) can at best return.
    {
      SCOPED_TRACE("bfloat16 activations");
      const ops::OpInputs inb = bf16_inputs(in32);
      const at::Tensor gob = go32.to(at::kBFloat16);
      const OpRun kb = run_op(c.kernel, inb, gob);
      const OpRun tb = run_op(c.reference, inb.to(at::kDouble), gob.to(at::kDouble));
      EXPECT_EQ(kb.out.scalar_type(), at::kBFloat16) << "output dtype";
      const auto tv = all(tb), kv = all(kb);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (!kv[i].defined()) continue;
        // Activation gradients come back in bfloat16, parameter gradients in float32.
        const at::ScalarType want = i == 0 || inb.inputs[i - 1].seq_dim >= 0 ? at::kBFloat16
                                                                               : at::kFloat;
        EXPECT_EQ(kv[i].scalar_type(), want) << quantity(inb, i) << " dtype";
        EXPECT_TRUE(at::isfinite(kv[i]).all().item<bool>()) << quantity(inb, i) << " (bf16)";
        const double ek = rel_err(kv[i], tv[i]);
        const double er = rel_err(tv[i].to(at::kBFloat16), tv[i]);
        EXPECT_LE(ek, 2 * er + kBFloat16Floor)
            << quantity(inb, i) << ": bfloat16 kernel " << ek << " from the float64 result, "
            << "bfloat16 reference " << er << " (2x rule, floor " << kBFloat16Floor << ")";
        if (verbose)
          std::printf("[op_check] %s %s bf16 %-12s kernel %.3g reference %.3g\n",
                      c.name().c_str(), variant.name.c_str(), quantity(inb, i).c_str(), ek, er);
      }
      if (padded && c.zero_padded_outputs) {
        EXPECT_EQ(max_at(kb.out.to(at::kDouble), pad_out), 0.0)
            << "outputs at padded positions (bf16)";
      }
      // Rounded once: each bfloat16 result is the kernel's float32 result on the same values
      // (bfloat16 activations widened, which is exact) rounded to nearest, so it lies within
      // half a bfloat16 ulp of it, at most 2^-8 of its magnitude (plus float32's own slack,
      // 1e-6 of the tensor's scale: the two runs may differ in the last float32 bits). Converting around a float32 kernel
      // meets this; so must a kernel that reads and writes bfloat16 itself. Parameter
      // gradients stay float32 and match to float32 accuracy.
      const OpRun kw = run_op(c.kernel, inb.to(at::kFloat), gob.to(at::kFloat));
      const auto wv = all(kw);
      for (size_t i = 0; i < kv.size(); ++i) {
        if (!kv[i].defined()) continue;
        const at::Tensor got = kv[i].to(at::kDouble), want = wv[i].to(at::kDouble);
        const at::Tensor excess = (got - want).abs() - std::ldexp(1.0, -8) * want.abs() -
                                  1e-6 * want.abs().max();
        if (kv[i].scalar_type() == at::kBFloat16)
          EXPECT_LE(excess.max().item<double>(), 1e-30)
              << quantity(inb, i) << ": a bfloat16 result is further than half a bfloat16 ulp "
              << "from the kernel's float32 result";
        else
          EXPECT_LE(rel_err(kv[i], wv[i]), 1e-5) << quantity(inb, i) << " (bf16 vs float32 run)";
      }
    }

    // 3. Padded rows.
    if (padded) {
      if (c.zero_padded_outputs) {
        EXPECT_EQ(max_at(k64.out, pad_out), 0.0) << "outputs at padded positions (float64)";
        EXPECT_EQ(max_at(k32.out, pad_out), 0.0) << "outputs at padded positions (float32)";
      }
      for (size_t i = 0; i < in64.inputs.size(); ++i) {
        const ops::OpInput& x = in64.inputs[i];
        if (!x.padded_grad_zero || !x.requires_grad) continue;
        const at::Tensor pad = broadcast_mask(mask.logical_not(), x.value, x.seq_dim);
        EXPECT_EQ(max_at(k64.grads[i], pad), 0.0) << "d" << x.name << " at padded positions (f64)";
        EXPECT_EQ(max_at(k32.grads[i], pad), 0.0) << "d" << x.name << " at padded positions (f32)";
      }
      // Large values at padded entries (which would dominate any softmax or sum) change no
      // valid output, and the valid outputs' gradient reaches no padded entry.
      ops::OpInputs loud = in64;
      for (auto& x : loud.inputs)
        if (x.seq_dim >= 0)
          x.value =
              x.value.masked_fill(broadcast_mask(mask.logical_not(), x.value, x.seq_dim), 100.0);
      const at::Tensor valid_out = pad_out.logical_not();
      const OpRun kl = run_op(c.kernel, loud, go64.masked_fill(pad_out, 0.0));
      EXPECT_TRUE(at::equal(kl.out.masked_select(valid_out), k64.out.masked_select(valid_out)))
          << "padded inputs changed valid outputs, by up to "
          << max_abs_err(kl.out.masked_select(valid_out), k64.out.masked_select(valid_out));
      for (size_t i = 0; i < loud.inputs.size(); ++i) {
        const ops::OpInput& x = loud.inputs[i];
        if (x.seq_dim < 0 || !x.requires_grad) continue;
        EXPECT_EQ(max_at(kl.grads[i], broadcast_mask(mask.logical_not(), x.value, x.seq_dim)), 0.0)
            << "d" << x.name << " at padded positions from the valid outputs";
        EXPECT_TRUE(at::isfinite(kl.grads[i]).all().item<bool>()) << "d" << x.name;
      }
    }

    // 4. Finite differences of the kernel.
    if (c.gradcheck) {
      SCOPED_TRACE("finite differences of the kernel");
      expect_gradients_match_fd([&](const std::vector<at::Tensor>& v) { return c.kernel(v, mask); },
                                fd_inputs(in64), fd_probes(c));
    }
  }

  if (c.gradcheck && o.reference_gradcheck && c.L <= o.reference_gradcheck_max_len) {
    SCOPED_TRACE("finite differences of the reference");
    expect_gradients_match_fd(
        [&](const std::vector<at::Tensor>& v) { return c.reference(v, mask); }, fd_inputs(in64),
        fd_probes(c));
  }
}

/// gtest's name for a case parameter.
inline std::string op_case_test_name(const ::testing::TestParamInfo<ops::OpCase>& info) {
  return info.param.name();
}

}  // namespace seqmix::testing

namespace seqmix::ops {
// gtest prints a failing parameter with this (found by argument-dependent lookup).
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name(); }
}  // namespace seqmix::ops
