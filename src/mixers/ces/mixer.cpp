// ETSMLP's registry row (mixer "etsmlp", the ESMLP block) and its configuration section,
// [model.ces].
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/ces.h"

namespace seqmix::mixers::ces {

namespace {

using models::ModelConfig;
using models::option_field;
using O = nn::ESMLPOptions;

const O& options(const ModelConfig& c) { return c.options<O>("ces"); }

// A number field of the CES options inside the ESMLP's.
template <class Get, class Set>
util::Field<models::MixerOptions> number(const char* name, const char* doc, Get get, Set set,
                                         std::function<std::string(const O&)> check) {
  return option_field<double, O>(
      name, doc, [get](const O& o) { return (o.ces().*get)(); },
      [set](O& o, double v) { (o.ces().*set)(v); }, std::move(check));
}

// A true/false field of the CES options.
util::Field<models::MixerOptions> flag(const char* name, const char* doc,
                                       const bool& (nn::CESOptions::*get)() const noexcept,
                                       nn::CESOptions& (nn::CESOptions::*set)(const bool&)) {
  return option_field<bool, O>(
      name, doc, [get](const O& o) { return (o.ces().*get)(); },
      [set](O& o, bool v) { (o.ces().*set)(v); });
}

using C = nn::CESOptions;
using Read = const double& (C::*)() const noexcept;
using Write = C& (C::*)(const double&);

}  // namespace

models::MixerSpec mixer() {
  models::MixerSpec s;
  s.name = "etsmlp";
  s.summary = "ESMLP: complex exponential smoothing inside an MLP of width model.d_ff";
  s.source = "etsmlp Sec. 3.2";
  s.section = "ces";
  s.has_ffn = false;  // the mixer is itself the block's MLP (etsmlp Fig. 2)
  s.zero_padded_outputs = false;  // its gate and shortcut see the padded inputs
  s.defaults = models::MixerOptions(O(/*d_model=*/0, /*d_hidden=*/0));
  // The ring and the bounds are checked together: each check sees the whole section.
  auto ring = [](const O& o) -> std::string {
    const double lo = o.ces().r_min(), hi = o.ces().r_max();
    if (lo > 0 && lo <= hi && hi < 1) return "";
    return "need 0 < r_min <= r_max < 1, got r_min " + util::format_number(lo) + ", r_max " +
           util::format_number(hi);
  };
  s.fields = {
      option_field<bool, O>(
          "gate", "ESMLP-Gate: output times sigmoid(W_g X)", [](const O& o) { return o.gate(); },
          [](O& o, bool v) { o.gate(v); }),
      option_field<std::string, O>(
          "shortcut", "omega (the authors' code) | sigmoid (eq. 13) | none",
          [](const O& o) { return nn::to_string(o.ces().shortcut()); },
          [](O& o, const std::string& v) { o.ces().shortcut(nn::parse_ces_shortcut(v)); }),
      flag("normalize", "kernel times sqrt(1 - |mu|^2) (appendix B, LRU)", &C::normalize,
           &C::normalize),
      number("r_min", "inner radius of lambda's init ring", Read(&C::r_min), Write(&C::r_min),
             ring),
      number("r_max", "outer radius of lambda's init ring", Read(&C::r_max), Write(&C::r_max),
             ring),
      number("max_phase",
             "largest initial phase of lambda, radians (0 with r_min = r_max: one fixed point, "
             "etsmlp Table 4's Stable)",
             Read(&C::max_phase), Write(&C::max_phase),
             [](const O& o) -> std::string {
               const double v = o.ces().max_phase();
               if (std::isfinite(v) && v >= 0) return "";
               return "must be a finite number >= 0 (radians), got " + util::format_number(v);
             }),
      number("max_lambda", "bound on |mu| (eq. 12)", Read(&C::max_lambda),
             Write(&C::max_lambda),
             [](const O& o) -> std::string {
               const double v = o.ces().max_lambda();
               if (v > 0 && v <= 1 && !(o.ces().normalize() && v >= 1)) return "";
               return "must be in (0, 1] (below 1 with normalize), got " +
                      util::format_number(v);
             }),
      option_field<std::string, O>(
          "impl", "kernel (recurrence) | reference (FFT)",
          [](const O& o) { return ops::to_string(o.ces().backend()); },
          [](O& o, const std::string& v) { o.ces().backend(ops::parse_backend(v)); }),
      flag("alpha", "learned damping exponent alpha (false: etsmlp Table 3 No alpha)",
           &C::alpha, &C::alpha),
      flag("beta", "learned input factor beta (false: etsmlp Table 3 No beta)", &C::beta,
           &C::beta),
      flag("real", "real instead of complex lambda, alpha, beta (etsmlp Table 3 Real)",
           &C::real, &C::real),
  };
  s.variants = {
      {"gate_no_shortcut",
       {{"gate", util::FieldValue(true)}, {"shortcut", util::FieldValue(std::string("none"))}}},
      {"normalize_real", {{"normalize", util::FieldValue(true)}, {"real", util::FieldValue(true)}}},
      models::reference_variant(),
  };
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    const O& o = options(c);
    nn::CESOptions inner = o.ces();
    inner.channels(c.d_ff);
    return std::make_shared<nn::ESMLPImpl>(
        O(c.d_model, c.d_ff).causal(c.causal).gate(o.gate()).ces(inner));
  };
  // in_proj, out_proj (with biases), gate, CES (lambda, alpha, beta per channel and
  // direction, complex unless real, alpha and beta unless ablated), omega per channel.
  s.parameters = [](const ModelConfig& c) {
    using R = long double;
    const O& o = options(c);
    const R D = static_cast<R>(c.d_model), F = static_cast<R>(c.d_ff);
    const R channels = c.causal ? F : 2 * F;
    const R per_number = o.ces().real() ? 1 : 2;
    const R numbers = 1 + (o.ces().alpha() ? 1 : 0) + (o.ces().beta() ? 1 : 0);
    return 2 * D * F + F + D + (o.gate() ? D * D + D : 0) + numbers * per_number * channels +
           (o.ces().shortcut() == nn::CESShortcut::none ? 0 : F);
  };
  // norm output, residual input; projection, CES output, ReLU output.
  s.activations = [](const ModelConfig& c, double) { return 2.0 * c.d_model + 3.0 * c.d_ff; };
  return s;
}

}  // namespace seqmix::mixers::ces
