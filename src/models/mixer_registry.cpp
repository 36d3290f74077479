#include "seqmix/models/mixer_registry.h"

#include <deque>
#include <mutex>
#include <stdexcept>

#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/self_attention.h"
#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/common.h"

namespace seqmix::models {

namespace {

using R = long double;

// ops::aib_num_levels(max_len), bounded so that any max_len (up to 2^63 - 1) terminates.
int64_t aib_levels(int64_t max_len) {
  int64_t levels = 0;
  while (levels < 63 && (int64_t{1} << levels) < max_len) ++levels;
  return std::max<int64_t>(levels, 1);
}

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw std::invalid_argument("model." + key + ": " + what);
}

MixerSpec aib_row() {
  MixerSpec s;
  s.name = "aib";
  s.summary = "AIB (Weird) attention: log-depth weighted prefix sum O = H / U";
  s.source = "weird-net Sec. III, aib-net, moss";
  s.section = "aib";
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    return std::make_shared<nn::AIBAttentionImpl>(
        nn::AIBAttentionOptions(c.d_model, c.max_len)
            .causal(c.causal)
            .weights(ops::parse_aib_weights(c.aib.weights))
            .bias_av(c.aib.bias)
            .backend(ops::parse_backend(c.aib.impl))
            .n_layers(c.n_layers));
  };
  s.parameters = [](const ModelConfig& c) {
    const R D = static_cast<R>(c.d_model);
    return 3 * D * D + D + (c.aib.bias ? 2 * D : 0) +
           (c.aib.weights == "ones" ? 0 : static_cast<R>(aib_levels(c.max_len)) * D);
  };
  s.activations = [](const ModelConfig& c, double) { return 3.0 * c.d_model; };  // A, V, O
  s.validate = [](const ModelConfig& c) {
    if (!c.causal && c.d_model % 2 != 0) fail("d_model", "must be even for the AIB encoder");
  };
  return s;
}

MixerSpec attention_row() {
  MixerSpec s;
  s.name = "attention";
  s.summary = "softmax self-attention, model.n_heads heads (the Transformer baseline)";
  s.source = "GPT-2; the papers' baseline";
  s.section = "attention";
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    return std::make_shared<nn::SelfAttentionImpl>(
        nn::SelfAttentionOptions(c.d_model, c.n_heads)
            .causal(c.causal)
            .dropout(c.dropout)
            .bias(c.bias)
            .n_layers(c.n_layers)
            .backend(ops::parse_backend(c.attention.impl)));
  };
  s.parameters = [](const ModelConfig& c) {
    const R D = static_cast<R>(c.d_model);
    return 4 * D * D + (c.bias ? 4 * D : 0);
  };
  // Q, K, V and the output; the reference path keeps its [L, L] probabilities per head.
  s.activations = [](const ModelConfig& c, double L) {
    return 4.0 * c.d_model +
           (c.attention.impl == "reference" ? static_cast<double>(c.n_heads) * L : 0.0);
  };
  s.validate = [](const ModelConfig& c) {
    if (c.n_heads < 1 || c.d_model % c.n_heads != 0)
      fail("n_heads", "must divide d_model (" + std::to_string(c.d_model) + "), got " +
                          std::to_string(c.n_heads));
  };
  return s;
}

MixerSpec extractor_row() {
  MixerSpec s;
  s.name = "extractor";
  s.summary = "the Extractor: one D x D matrix per lag (model.max_len lags), adjusted";
  s.source = "extractor eqs. 18-20";
  s.section = "extractor";
  s.bidirectional = false;  // the paper defines a causal convolution only
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    return std::make_shared<nn::ExtractorImpl>(nn::ExtractorOptions(c.d_model, c.max_len)
                                                   .adjust(c.extractor.adjust)
                                                   .out_proj(c.extractor.out_proj)
                                                   .backend(ops::parse_backend(c.extractor.impl))
                                                   .n_layers(c.n_layers));
  };
  s.parameters = [](const ModelConfig& c) {
    const R D = static_cast<R>(c.d_model), L = static_cast<R>(c.max_len);
    return L * D * D + (c.extractor.adjust ? D * D : 0) + (c.extractor.out_proj ? D * D : 0);
  };
  s.activations = [](const ModelConfig& c, double) { return 3.0 * c.d_model; };  // X W_adj, ext, out
  // The FFT form transforms its lag matrices: the spectrum of [L, D, D] at 2L points is
  // (L + 1) D^2 complex values, kept for backward, plus its gradient and the backward's
  // transform of it: about 6 L D^2 floats. Measured (seqmix bench models, extractor-transformer,
  // D = 256, 4 layers): a peak of 10 floats per lag-matrix entry at L = 512 and 1024, of which
  // weights, gradients and AdamW's moments are the other 4.
  s.workspace = [](const ModelConfig& c, double L) {
    const double D = static_cast<double>(c.d_model);
    return ops::parse_backend(c.extractor.impl) == ops::Backend::kernel ? 6.0 * L * D * D : 0.0;
  };
  return s;
}

MixerSpec etsmlp_row() {
  MixerSpec s;
  s.name = "etsmlp";
  s.summary = "ESMLP: complex exponential smoothing inside an MLP of width model.d_ff";
  s.source = "etsmlp Sec. 3.2";
  s.section = "ces";
  s.has_ffn = false;  // the mixer is itself the block's MLP (etsmlp Fig. 2)
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    nn::CESOptions ces(c.d_ff);
    ces.r_min(c.ces.r_min)
        .r_max(c.ces.r_max)
        .max_phase(c.ces.max_phase)
        .max_lambda(c.ces.max_lambda)
        .shortcut(nn::parse_ces_shortcut(c.ces.shortcut))
        .normalize(c.ces.normalize)
        .backend(ops::parse_backend(c.ces.impl))
        .alpha(c.ces.alpha)
        .beta(c.ces.beta)
        .real(c.ces.real);
    return std::make_shared<nn::ESMLPImpl>(
        nn::ESMLPOptions(c.d_model, c.d_ff).causal(c.causal).gate(c.ces.gate).ces(ces));
  };
  // in_proj, out_proj (with biases), gate, CES (lambda, alpha, beta per channel and
  // direction, complex unless real, alpha and beta unless ablated), omega per channel.
  s.parameters = [](const ModelConfig& c) {
    const R D = static_cast<R>(c.d_model), F = static_cast<R>(c.d_ff);
    const R C = c.causal ? F : 2 * F;
    const R per_number = c.ces.real ? 1 : 2;
    const R numbers = 1 + (c.ces.alpha ? 1 : 0) + (c.ces.beta ? 1 : 0);
    return 2 * D * F + F + D + (c.ces.gate ? D * D + D : 0) + numbers * per_number * C +
           (c.ces.shortcut == "none" ? 0 : F);
  };
  // norm output, residual input; projection, CES output, ReLU output.
  s.activations = [](const ModelConfig& c, double) { return 2.0 * c.d_model + 3.0 * c.d_ff; };
  return s;
}

struct Registry {
  std::mutex mutex;
  std::deque<MixerSpec> rows;  // a deque: adding a row keeps references to the others valid
  size_t builtins = 0;
  Registry() {
    // The built-in mixers: one row each.
    rows = {aib_row(), attention_row(), extractor_row(), etsmlp_row()};  // one line per mixer
    builtins = rows.size();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names(const std::deque<MixerSpec>& rows) {
  std::string s;
  for (size_t i = 0; i < rows.size(); ++i)
    s += (i == 0 ? "" : i + 1 == rows.size() ? " or " : ", ") + rows[i].name;
  return s;
}

}  // namespace

const std::deque<MixerSpec>& mixer_registry() { return registry().rows; }

const MixerSpec& find_mixer(const std::string& name) {
  const auto& rows = registry().rows;
  for (const auto& r : rows)
    if (r.name == name) return r;
  throw std::invalid_argument("unknown mixer '" + name + "' (expected " + names(rows) + ")");
}

void register_mixer(MixerSpec spec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (spec.name.empty()) throw std::invalid_argument("register_mixer: the name is empty");
  if (!spec.build) throw std::invalid_argument("register_mixer: '" + spec.name + "' has no build");
  // The count must not need the model: a configuration is checked against the machine's
  // memory (RunConfig::check_resources) before anything is built.
  if (!spec.parameters)
    throw std::invalid_argument("register_mixer: '" + spec.name + "' has no parameters formula");
  for (const auto& row : r.rows)
    if (row.name == spec.name)
      throw std::invalid_argument("register_mixer: a mixer named '" + spec.name + "' exists");
  r.rows.push_back(std::move(spec));
}

void unregister_mixer(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = r.builtins; i < r.rows.size(); ++i)
    if (r.rows[i].name == name) {
      r.rows.erase(r.rows.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  throw std::invalid_argument("unregister_mixer: no registered mixer named '" + name + "'");
}

}  // namespace seqmix::models
