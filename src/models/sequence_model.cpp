#include "seqmix/models/sequence_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/self_attention.h"

namespace seqmix::models {

void ModelConfig::validate() const {
  auto fail = [](const std::string& key, const std::string& what) {
    throw std::invalid_argument("model." + key + ": " + what);
  };
  auto at_least = [&](const char* key, int64_t v, int64_t lo) {
    if (v < lo) fail(key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
  };
  auto number = [](double v) {
    if (std::isnan(v)) return std::string("nan");  // never "-nan"
    if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf");
    std::ostringstream ss;
    ss << v;
    return ss.str();
  };
  at_least("vocab_size", vocab_size, 1);
  at_least("d_model", d_model, 2);
  at_least("n_layers", n_layers, 1);
  at_least("d_ff", d_ff, 1);
  at_least("max_len", max_len, 1);
  if (!(dropout >= 0 && dropout < 1))
    fail("dropout", "must be a number in [0, 1), got " + number(dropout));
  if (mixers.empty()) fail("mixers", "must name at least one mixer");
  for (const auto& m : mixers) {
    if (m == "attention") {
      if (n_heads < 1 || d_model % n_heads != 0)
        fail("n_heads", "must divide d_model (" + std::to_string(d_model) + "), got " +
                            std::to_string(n_heads));
    } else if (m == "aib") {
      if (!causal && d_model % 2 != 0) fail("d_model", "must be even for the AIB encoder");
    } else if (m == "extractor") {
      if (!causal) fail("causal", "the Extractor is causal only");
    } else if (m != "etsmlp") {
      fail("mixers", "unknown mixer '" + m + "' (expected aib, attention, extractor or etsmlp)");
    }
  }
  // The CES ring and bounds are checked whatever the mixers, so a stored configuration never
  // carries a NaN or an infinity (the comparisons below are false for NaN).
  if (!(ces_r_min > 0 && ces_r_min <= ces_r_max && ces_r_max < 1))
    fail("ces_r_min", "need 0 < ces_r_min <= ces_r_max < 1, got ces_r_min " + number(ces_r_min) +
                          ", ces_r_max " + number(ces_r_max));
  if (!(ces_max_lambda > 0 && ces_max_lambda <= 1) || (ces_normalize && ces_max_lambda >= 1))
    fail("ces_max_lambda",
         "must be in (0, 1] (below 1 with ces_normalize), got " + number(ces_max_lambda));
  if (!(std::isfinite(ces_max_phase) && ces_max_phase > 0))
    fail("ces_max_phase", "must be a finite number > 0 (radians), got " + number(ces_max_phase));
  if (n_classes < 0)
    fail("n_classes", "must be >= 0 (0: no classification head), got " + std::to_string(n_classes));
  if (cls_pair && n_classes < 1) fail("cls_pair", "needs a classification head (n_classes >= 1)");
  if (norm_type != "layer" && norm_type != "batch")
    fail("norm_type", "must be layer or batch, got '" + norm_type + "'");
  nn::parse_ces_shortcut(ces_shortcut);
  ops::parse_backend(ces_impl);
  nn::parse_activation(activation);  // throws with the offending name
  ops::parse_aib_weights(aib_weights);
  ops::parse_backend(aib_impl);
  ops::parse_backend(extractor_impl);
  ops::parse_backend(attention_impl);
}

namespace {

// The parameter count in long double: x86-64's 64-bit mantissa holds every integer below 2^64
// exactly, so no product or sum below that bound rounds, and none can overflow. Layers are
// counted per mixer kind (n_layers may be huge in an unchecked configuration).
long double count_parameters(const ModelConfig& c) {
  using R = long double;
  const R D = static_cast<R>(c.d_model), F = static_cast<R>(c.d_ff);
  const R V = static_cast<R>(c.vocab_size), L = static_cast<R>(c.max_len);
  R n = V * D + L * D;  // embeddings
  // ops::aib_num_levels(max_len), bounded so that any max_len (up to 2^63 - 1) terminates.
  int64_t levels = 0;
  while (levels < 63 && (int64_t{1} << levels) < c.max_len) ++levels;
  levels = std::max<int64_t>(levels, 1);
  const int64_t M = static_cast<int64_t>(c.mixers.size());
  for (int64_t j = 0; j < M; ++j) {
    // Layers i in [0, n_layers) with i % M == j.
    const int64_t layers = c.n_layers / M + (j < c.n_layers % M ? 1 : 0);
    if (layers <= 0) continue;
    const std::string& m = c.mixers[static_cast<size_t>(j)];
    R per = 0;
    if (m == "aib")
      per += 3 * D * D + D + (c.aib_bias ? 2 * D : 0) +
             (c.aib_weights == "ones" ? 0 : static_cast<R>(levels) * D);
    else if (m == "extractor")
      per += L * D * D + (c.extractor_adjust ? D * D : 0) + (c.extractor_out_proj ? D * D : 0);
    else if (m != "etsmlp")
      per += 4 * D * D + (c.bias ? 4 * D : 0);
    if (m == "etsmlp") {
      // in_proj, out_proj (with biases), gate, CES (3 complex parameters per channel and
      // direction, omega per channel); one norm, no FFN.
      const R C = c.causal ? F : 2 * F;
      per += 2 * D * F + F + D + (c.ces_gate ? D * D + D : 0) + 6 * C +
             (c.ces_shortcut == "none" ? 0 : F);
      if (c.norm) per += 2 * D;  // one norm (LayerNorm or BatchNorm: weight and bias)
    } else {
      per += 2 * D * F + (c.bias ? F + D : 0);  // FFN
      if (c.norm) per += 4 * D;                 // two norms
    }
    n += per * static_cast<R>(layers);
  }
  if (c.norm) n += 2 * D;                     // final norm
  if (!c.tie_embeddings) n += D * V;          // head (no bias)
  if (c.n_classes > 0) n += D * static_cast<R>(c.n_classes) + static_cast<R>(c.n_classes);
  if (c.cls_pair) n += 4 * D * D + D;
  return n;
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const long double n = count_parameters(*this);
  if (!(n < 9223372036854775807.0L))
    throw std::overflow_error("model: the parameter count (about " +
                              std::to_string(static_cast<double>(n)) +
                              ") does not fit in 64 bits; lower model.n_layers, model.d_model, "
                              "model.d_ff, model.vocab_size or model.max_len");
  return static_cast<int64_t>(n);
}

double ModelConfig::num_parameters_approx() const {
  return static_cast<double>(count_parameters(*this));
}

SequenceModelImpl::SequenceModelImpl(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  const int64_t D = config_.d_model;
  tok_emb = register_module("tok_emb", torch::nn::Embedding(config_.vocab_size, D));
  pos_emb = register_parameter("pos_emb", torch::empty({config_.max_len, D}));
  blocks = register_module("blocks", torch::nn::ModuleList());
  const auto act = nn::parse_activation(config_.activation);
  const auto weights = ops::parse_aib_weights(config_.aib_weights);
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string& kind = config_.mixers[static_cast<size_t>(i) % config_.mixers.size()];
    std::shared_ptr<nn::MixerImpl> mixer;
    if (kind == "aib") {
      mixer =
          std::make_shared<nn::AIBAttentionImpl>(nn::AIBAttentionOptions(D, config_.max_len)
                                                     .causal(config_.causal)
                                                     .weights(weights)
                                                     .bias_av(config_.aib_bias)
                                                     .backend(ops::parse_backend(config_.aib_impl))
                                                     .n_layers(config_.n_layers));
    } else if (kind == "extractor") {
      mixer = std::make_shared<nn::ExtractorImpl>(
          nn::ExtractorOptions(D, config_.max_len)
              .adjust(config_.extractor_adjust)
              .out_proj(config_.extractor_out_proj)
              .backend(ops::parse_backend(config_.extractor_impl))
              .n_layers(config_.n_layers));
    } else if (kind == "etsmlp") {
      nn::CESOptions ces(config_.d_ff);
      ces.r_min(config_.ces_r_min)
          .r_max(config_.ces_r_max)
          .max_phase(config_.ces_max_phase)
          .max_lambda(config_.ces_max_lambda)
          .shortcut(nn::parse_ces_shortcut(config_.ces_shortcut))
          .normalize(config_.ces_normalize)
          .backend(ops::parse_backend(config_.ces_impl));
      blocks->push_back(nn::make_esmlp_block(nn::ESMLPOptions(D, config_.d_ff)
                                                 .causal(config_.causal)
                                                 .gate(config_.ces_gate)
                                                 .ces(ces),
                                             config_.norm_type, config_.pre_norm,
                                             config_.dropout, config_.norm));
      continue;
    } else {
      mixer = std::make_shared<nn::SelfAttentionImpl>(nn::SelfAttentionOptions(D, config_.n_heads)
                                                          .causal(config_.causal)
                                                          .dropout(config_.dropout)
                                                          .bias(config_.bias)
                                                          .n_layers(config_.n_layers)
                                                          .backend(ops::parse_backend(
                                                              config_.attention_impl)));
    }
    blocks->push_back(nn::Block(mixer,
                                nn::FeedForwardOptions(D, config_.d_ff)
                                    .activation(act)
                                    .dropout(config_.dropout)
                                    .bias(config_.bias)
                                    .n_layers(config_.n_layers),
                                config_.pre_norm, config_.dropout, config_.norm,
                                /*with_ffn=*/true, config_.norm_type));
  }
  if (config_.norm)
    norm_f = register_module("norm_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  if (!config_.tie_embeddings)
    head = register_module(
        "head", torch::nn::Linear(torch::nn::LinearOptions(D, config_.vocab_size).bias(false)));
  if (config_.n_classes > 0)
    cls_head = register_module("cls_head", torch::nn::Linear(D, config_.n_classes));
  if (config_.cls_pair)
    cls_pair_proj = register_module("cls_pair_proj", torch::nn::Linear(4 * D, D));
  torch::NoGradGuard no_grad;
  const double std = 1.0 / std::sqrt(static_cast<double>(D));
  tok_emb->weight.normal_(0.0, std);
  pos_emb.normal_(0.0, std);
  if (head) head->weight.normal_(0.0, std);
  if (cls_head) {
    cls_head->weight.normal_(0.0, std);
    cls_head->bias.zero_();
  }
  if (cls_pair_proj) {
    cls_pair_proj->weight.normal_(0.0, 1.0 / std::sqrt(4.0 * static_cast<double>(D)));
    cls_pair_proj->bias.zero_();
  }
}

at::Tensor SequenceModelImpl::hidden(const at::Tensor& tokens, const at::Tensor& mask) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
              "SequenceModel: tokens must be int64 [B, L], got ", tokens.scalar_type(), " ",
              tokens.sizes());
  const int64_t L = tokens.size(1);
  TORCH_CHECK(L <= config_.max_len, "SequenceModel: sequence length ", L, " exceeds max_len ",
              config_.max_len);
  at::Tensor x = tok_emb(tokens) + pos_emb.narrow(0, 0, L);
  if (config_.dropout > 0 && is_training()) x = at::dropout(x, config_.dropout, true);
  for (const auto& m : *blocks) x = m->as<nn::BlockImpl>()->forward(x, mask);
  return norm_f ? norm_f(x) : x;
}

at::Tensor SequenceModelImpl::pooled(const at::Tensor& tokens, const at::Tensor& mask) {
  const at::Tensor h = hidden(tokens, mask);
  const int64_t B = h.size(0), L = h.size(1);
  const at::Tensor valid = mask.defined() ? mask : at::ones({B, L}, tokens.options().dtype(at::kBool));
  TORCH_CHECK(L > 0 && valid.any(1).all().item<bool>(),
              "SequenceModel::pooled: every sequence needs at least one valid position");
  if (!config_.causal) {
    const at::Tensor w = valid.unsqueeze(-1).to(h.scalar_type());
    return (h * w).sum(1) / w.sum(1);
  }
  // The last valid position: the first valid one of the reversed mask.
  const at::Tensor last = (L - 1) - valid.flip({1}).to(at::kFloat).argmax(1);
  return h.index({at::arange(B, last.options()), last});
}

at::Tensor SequenceModelImpl::classify(const at::Tensor& tokens, const at::Tensor& mask) {
  TORCH_CHECK(cls_head, "SequenceModel::classify: the model has no classification head "
                        "(set model.n_classes)");
  TORCH_CHECK(!cls_pair_proj, "SequenceModel::classify: a pair classifier (model.cls_pair) "
                              "classifies two sequences: use classify_pair");
  return cls_head(pooled(tokens, mask));
}

at::Tensor SequenceModelImpl::classify_pair(const at::Tensor& tokens_a, const at::Tensor& mask_a,
                                            const at::Tensor& tokens_b, const at::Tensor& mask_b) {
  TORCH_CHECK(cls_pair_proj, "SequenceModel::classify_pair: the model is not a pair classifier "
                             "(set model.cls_pair and model.n_classes)");
  const at::Tensor u = pooled(tokens_a, mask_a), v = pooled(tokens_b, mask_b);
  return cls_head(at::relu(cls_pair_proj(at::cat({u, v, u * v, u - v}, -1))));
}

at::Tensor SequenceModelImpl::logits(const at::Tensor& h) {
  return config_.tie_embeddings ? at::matmul(h, tok_emb->weight.t()) : head(h);
}

at::Tensor SequenceModelImpl::forward(const at::Tensor& tokens, const at::Tensor& mask) {
  return logits(hidden(tokens, mask));
}

std::vector<nn::MixerState> SequenceModelImpl::init_state(int64_t batch) const {
  std::vector<nn::MixerState> states;
  for (const auto& m : *blocks) states.push_back(m->as<nn::BlockImpl>()->mixer->init_state(batch));
  return states;
}

at::Tensor SequenceModelImpl::step(const at::Tensor& token, std::vector<nn::MixerState>& states) {
  TORCH_CHECK(states.size() == blocks->size(), "SequenceModel::step: expected ", blocks->size(),
              " states, got ", states.size());
  const int64_t pos = states.empty() ? 0 : states[0].pos;
  TORCH_CHECK(pos < config_.max_len, "SequenceModel::step: position ", pos, " reaches max_len ",
              config_.max_len);
  at::Tensor x = tok_emb(token) + pos_emb[pos];
  size_t i = 0;
  for (const auto& m : *blocks) x = m->as<nn::BlockImpl>()->step(x, states[i++]);
  return logits(norm_f ? norm_f(x) : x);
}

}  // namespace seqmix::models
