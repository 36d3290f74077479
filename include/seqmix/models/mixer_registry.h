#pragma once
/// @file mixer_registry.h
/// The mixer registry: one row per sequence mixer, the only place that knows mixer names.
/// SequenceModel builds its layers from it, ModelConfig validates and counts parameters
/// through it, the training memory estimate asks it, and `seqmix info` lists it.
///
/// Adding a mixer (docs/ARCHITECTURE.md, "How to add a mixer"): a folder src/mixers/<name>/
/// holding its op, kernels, layer, this row (a function `MixerSpec <name>::mixer()`) and its
/// op cases, plus one line in the SEQMIX_MIXERS list of CMakeLists.txt. From a program or a
/// test, one register_mixer call adds a row instead.
///
/// Example (a mixer defined outside the library, see tests/models/test_registry.cpp):
///   seqmix::models::MixerSpec spec;
///   spec.name = "moving-average";
///   spec.summary = "causal mean of the last 4 positions";
///   spec.bidirectional = false;
///   spec.parameters = [](const ModelConfig& c) { return 1.0L * c.d_model * (c.d_model + 1); };
///   spec.build = [](const ModelConfig& c, int64_t) {
///     return std::make_shared<MovingAverageImpl>(c.d_model, 4);
///   };
///   seqmix::models::register_mixer(spec);
///   ModelConfig c;  c.mixers = {"moving-average", "attention"};
///   SequenceModel model(c);
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "seqmix/models/model_config.h"
#include "seqmix/nn/mixer.h"
#include "seqmix/ops/common.h"

namespace seqmix::models {

struct MixerSpec {
  std::string name;     ///< the name in model.mixers
  std::string summary;  ///< one line for `seqmix info` and help texts
  std::string source;   ///< paper and section it implements
  /// The ModelConfig section it reads ("aib" for [model.aib]), empty if none; a section
  /// belongs to one mixer.
  std::string section;
  /// The section's options at their defaults: its layer's options type (the sizes in it are
  /// placeholders, build sets them from [model]).
  MixerOptions defaults;
  /// The section's keys, each declared once: name, documentation, check, flag
  /// (models::option_field).
  std::vector<util::Field<MixerOptions>> fields;
  /// Its block adds the FFN sublayer (and a second norm). False for a mixer that is itself
  /// an MLP (ESMLP): the block is [norm -> mixer -> residual] only.
  bool has_ffn = true;
  bool causal = true;         ///< has a causal form (model.causal = true)
  bool bidirectional = true;  ///< has a bidirectional form (model.causal = false)
  /// Its causal form decodes token by token (MixerImpl::step equals forward's last row).
  bool incremental = true;
  /// Its layer's outputs at padded positions are exactly 0 (false: finite only, like the
  /// ESMLP, whose gate and shortcut see the padded inputs).
  bool zero_padded_outputs = true;
  /// Settings of its section that the tests build besides the defaults
  /// (tests/nn/test_mixers.cpp walks every row with each): a name, and key = value pairs of
  /// the section ("weights" = "exp" for [model.aib] weights).
  struct Variant {
    std::string name;
    std::vector<std::pair<std::string, util::FieldValue>> settings;
  };
  std::vector<Variant> variants;

  /// Builds the mixer of layer `layer` (0-based) of a model with configuration `c`.
  std::function<std::shared_ptr<nn::MixerImpl>(const ModelConfig& c, int64_t layer)> build;
  /// Trainable parameters of one layer's mixer (its block's FFN and norms are counted by the
  /// caller from has_ffn), in long double so that no size overflows. Required: configurations
  /// are checked against the machine's memory before any layer is built.
  std::function<long double(const ModelConfig& c)> parameters;
  /// float32 values one layer's mixer keeps per position for backward (the training memory
  /// estimate, train/configuration/config.cpp), given the positions `L`. Empty: 3 D (its
  /// inputs and output).
  std::function<double(const ModelConfig& c, double L)> activations;
  /// float32 values one layer's mixer holds during a training step whatever the batch size,
  /// besides its parameters (the training memory estimate), given the positions `L`. Empty:
  /// none.
  std::function<double(const ModelConfig& c, double L)> workspace;
  /// Constraints of this mixer on the shared fields (e.g. heads dividing d_model).
  /// @throws std::invalid_argument "model.<key>: ...".
  std::function<void(const ModelConfig& c)> validate;
};

/// The `impl` field of a section whose options O choose between an op's kernel and its
/// reference through O::backend(): "kernel" | "reference" (ops::parse_backend). `doc` says
/// what the two are for this mixer; `flag` is the command-line flag, if any.
template <class O>
util::Field<MixerOptions> backend_field(const char* doc, const char* flag = nullptr) {
  return option_field<std::string, O>(
      "impl", doc, [](const O& o) { return ops::to_string(o.backend()); },
      [](O& o, const std::string& v) { o.backend(ops::parse_backend(v)); }, {}, flag);
}

/// The variant that builds a row on its op's reference (impl = "reference"), for rows with a
/// backend_field.
inline MixerSpec::Variant reference_variant() {
  return {"reference", {{"impl", util::FieldValue(std::string("reference"))}}};
}

/// Every mixer, built-ins first, in registration order. Registering keeps references to
/// existing rows valid; unregistering invalidates them. Register mixers before building
/// models: registration is serialised, but not against lookups running on other threads.
// The built-in mixers' rows, in SEQMIX_MIXERS order (CMakeLists.txt). Defined by a file the
// build generates from that list (cmake/SeqmixHelpers.cmake, seqmix_add_mixers) that calls
// `MixerSpec seqmix::mixers::<folder>::mixer()` of each folder; the registry starts with them.
std::vector<MixerSpec> builtin_mixers();

const std::deque<MixerSpec>& mixer_registry();
/// The row named `name`.
/// @throws std::invalid_argument "unknown mixer 'x' (expected aib, attention, ...)".
const MixerSpec& find_mixer(const std::string& name);
/// Adds a mixer (for programs and tests defining their own).
/// @throws std::invalid_argument if the name is empty or taken, `build` or `parameters` is
///         empty, or the section is taken or has no defaults.
void register_mixer(MixerSpec spec);
/// Removes a mixer added by register_mixer (tests). Built-ins cannot be removed.
void unregister_mixer(const std::string& name);

}  // namespace seqmix::models
