#pragma once
/// @file model_config.h
/// Everything that fixes a model's architecture: the fields every model shares, plus one
/// section per mixer that has options, each declared once by the mixer's registry row
/// (models/mixer_registry.h) on its layer's own options type. In TOML:
///
///   [model]            shared: sizes, mixers, norms, FFN, heads
///   [model.aib]        AIB attention (weird-net / aib-net / moss): nn::AIBAttentionOptions
///   [model.attention]  softmax self-attention: nn::SelfAttentionOptions
///   [model.ces]        complex exponential smoothing (ETSMLP): nn::ESMLPOptions
///   [model.extractor]  the Extractor: nn::ExtractorOptions
///
/// Example:
///   seqmix::models::ModelConfig c;           // weird-net, mini
///   c.options<seqmix::nn::AIBAttentionOptions>("aib")
///       .weights(seqmix::ops::AIBWeights::exp);  // [model.aib] weights = "exp"
///   c.mixers = {"aib"};                      // Structure A
///   c.validate();                            // throws std::invalid_argument if inconsistent
#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "seqmix/util/fields.h"

namespace seqmix::models {

/// One mixer's configuration section, [model.<section>]: the options of its layer (its
/// XOptions, e.g. nn::AIBAttentionOptions) held by value. The sizes and flags every layer
/// shares (d_model, max_len, causal, ...) are set from [model] when a layer is built; the
/// section's fields are the options that only this mixer has.
class MixerOptions {
 public:
  MixerOptions() = default;
  template <class O, class = std::enable_if_t<!std::is_same_v<std::decay_t<O>, MixerOptions>>>
  explicit MixerOptions(O options) : value_(std::move(options)) {}

  /// The options, as type O. @throws std::logic_error if they are of another type.
  bool has_value() const { return value_.has_value(); }

  template <class O>
  const O& as() const {
    const O* o = std::any_cast<O>(&value_);
    if (!o) throw std::logic_error(std::string("MixerOptions: not a ") + typeid(O).name());
    return *o;
  }
  template <class O>
  O& as() {
    return const_cast<O&>(static_cast<const MixerOptions&>(*this).as<O>());
  }

 private:
  std::any value_;
};

/// A field of a mixer section whose options are of type O, declared on O's accessors: `get`
/// returns the value as T (a FieldValue type; enumerations as their names), `set` stores a T
/// (and throws std::invalid_argument, naming what it expects, for a name it does not know).
/// `check` sees the whole section (limits that depend on two fields).
template <class T, class O, class Get, class Set>
util::Field<MixerOptions> option_field(const char* name, const char* doc, Get get, Set set,
                                       std::function<std::string(const O&)> check = {},
                                       const char* flag = nullptr) {
  typename util::Field<MixerOptions>::Check erased;
  if (check) erased = [check](const MixerOptions& m) { return check(m.as<O>()); };
  return util::Field<MixerOptions>(
      name, util::FieldValue(T()),
      [get](const MixerOptions& m) { return util::FieldValue(T(get(m.as<O>()))); },
      [set](MixerOptions& m, const util::FieldValue& v) { set(m.as<O>(), std::get<T>(v)); }, doc,
      std::move(erased), flag);
}

struct MixerSpec;

/// Resolved from a preset, then a config file, then command-line overrides (see
/// train/configuration/config.h), and stored in every checkpoint.
struct ModelConfig {
  std::string preset = "weird-net";  ///< preset the config came from (models/presets.h)
  std::string size = "mini";         ///< size the config came from
  int64_t vocab_size = 256;          ///< V: 256 for byte-level models
  int64_t d_model = 128;             ///< D
  int64_t n_layers = 4;              ///< N
  int64_t n_heads = 4;               ///< heads of every self-attention mixer
  int64_t d_ff = 512;                ///< FFN inner width (ESMLP: its hidden width H)
  int64_t max_len = 256;             ///< longest sequence (learned positions, AIB levels)
  /// Mixer of layer i (0-based) is mixers[i % mixers.size()], each a name in the mixer
  /// registry (models/mixer_registry.h): aib, attention, extractor, etsmlp, ...
  /// {"aib", "attention"} is Structure B (AIB in the 1st, 3rd, ... layers), {"aib"} Structure A.
  std::vector<std::string> mixers = {"aib", "attention"};
  bool causal = true;               ///< causal (decoder) or bidirectional (encoder)
  std::string activation = "gelu";  ///< FFN activation: gelu | leaky_relu | relu
  bool pre_norm = true;             ///< pre-norm (GPT-2) or post-norm blocks
  double dropout = 0.0;             ///< residual, FFN and attention dropout
  bool tie_embeddings = true;       ///< LM head shares the token embedding matrix
  bool norm = true;  ///< norms in every block and before the head (false: none at all)
  bool bias = true;  ///< biases of the FFN and self-attention projections
  /// Block norms: "layer" (LayerNorm) or "batch" (BatchNorm, etsmlp Table 5's BN tasks).
  std::string norm_type = "layer";
  /// Classes of the classification head (Linear D -> n_classes on `pooled`); 0: none.
  int64_t n_classes = 0;
  /// Pair classification (LRA Retrieval's two-tower model): pooled u, v combined as
  /// [u, v, u*v, u-v] and classified by an MLP (Linear 4D -> D, ReLU, Linear D -> n_classes).
  bool cls_pair = false;

  /// The mixer sections by name ("aib" for [model.aib]), one per registered mixer that
  /// declares one, filled with its defaults when the configuration is made.
  std::map<std::string, MixerOptions> sections;

  /// The shared fields and every registered mixer's section at its defaults.
  ModelConfig();

  /// The options of section `section` ("aib"), of its mixer's type O (a registered mixer's
  /// section absent from `sections`, made before the mixer was registered, is added at its
  /// defaults). @throws std::invalid_argument if no registered mixer declares that section;
  /// std::logic_error if O is not its type.
  template <class O>
  O& options(const std::string& section) {
    return section_options(section).as<O>();
  }
  template <class O>
  const O& options(const std::string& section) const {
    return section_options(section).as<O>();
  }
  MixerOptions& section_options(const std::string& section);
  const MixerOptions& section_options(const std::string& section) const;

  /// The shared fields ([model]).
  static const std::vector<util::Field<ModelConfig>>& fields();

  /// Checks every field of every section (whatever the mixers, so a stored configuration
  /// never carries a NaN), then each mixer's own constraints through the registry: sizes
  /// >= 1 (d_model >= 2), dropout in [0, 1), known mixer, norm, activation and
  /// implementation names, directions the mixers support.
  /// @throws std::invalid_argument "model.<key>: <what was expected>, got <value>" (sections
  ///         as "model.ces.r_min") for the first invalid field.
  void validate() const;
  /// Exact number of trainable parameters, computed without building the model (and without
  /// iterating over the layers, so a huge n_layers costs nothing).
  /// @throws std::overflow_error if the count does not fit in int64.
  /// @throws std::invalid_argument for an unknown mixer name.
  int64_t num_parameters() const;
  /// num_parameters() as a double, for any sizes: never overflows (exact below 2^53).
  /// @throws std::invalid_argument for an unknown mixer name.
  double num_parameters_approx() const;
  /// Calls f(path, section, fields) for [model] itself (path "") and then each registered
  /// mixer's section ("aib", "attention", ...; `section` a MixerOptions), in registry order:
  /// the one list of sections that generic code (validation, TOML, presets) walks. Works on
  /// const and non-const configs.
  template <class Config, class F>
  static void visit_sections(Config& c, F&& f) {
    f(std::string(), c, fields());
    for (const MixerSpec* spec : mixers_with_sections())
      f(section_name(*spec), c.section_options(section_name(*spec)), section_fields(*spec));
  }
  /// Layers using mixers[j]: i in [0, n_layers) with i % mixers.size() == j.
  int64_t layers_of(size_t j) const;

 private:
  // The registry's rows that declare a section (models/mixer_registry.h, which includes this
  // header: hence these accessors rather than MixerSpec's members).
  static std::vector<const MixerSpec*> mixers_with_sections();
  static const std::string& section_name(const MixerSpec& spec);
  static const std::vector<util::Field<MixerOptions>>& section_fields(const MixerSpec& spec);
};

}  // namespace seqmix::models
