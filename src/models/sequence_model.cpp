#include "seqmix/models/sequence_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "seqmix/models/mixer_registry.h"

namespace seqmix::models {

SequenceModelImpl::SequenceModelImpl(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  const int64_t D = config_.d_model;
  tok_emb = register_module("tok_emb", torch::nn::Embedding(config_.vocab_size, D));
  pos_emb = register_parameter("pos_emb", torch::empty({config_.max_len, D}));
  blocks = register_module("blocks", torch::nn::ModuleList());
  const auto act = nn::parse_activation(config_.activation);
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const MixerSpec& spec =
        find_mixer(config_.mixers[static_cast<size_t>(i) % config_.mixers.size()]);
    // The mixer first, then its block: the order parameters are initialised in (the random
    // stream) and registered in (checkpoint names) is part of the format.
    std::shared_ptr<nn::MixerImpl> mixer = spec.build(config_, i);
    blocks->push_back(nn::Block(mixer,
                                nn::FeedForwardOptions(D, config_.d_ff)
                                    .activation(act)
                                    .dropout(config_.dropout)
                                    .bias(config_.bias)
                                    .n_layers(config_.n_layers),
                                config_.pre_norm, config_.dropout, config_.norm, spec.has_ffn,
                                config_.norm_type));
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
  if (tokens.numel() > 0) {
    // The embedding's own check says only "index out of range in self".
    const auto [lo, hi] = at::aminmax(tokens);
    TORCH_CHECK_INDEX(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < config_.vocab_size,
                      "SequenceModel: token ids must be in [0, ", config_.vocab_size,
                      ") (model.vocab_size), got ", lo.item<int64_t>(), " .. ",
                      hi.item<int64_t>());
  }
  if (mask.defined())
    TORCH_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == tokens.sizes(),
                "SequenceModel: mask must be bool ", tokens.sizes(), " like tokens, got ",
                mask.scalar_type(), " ", mask.sizes());
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
  for (const auto& name : config_.mixers)
    if (!find_mixer(name).incremental)
      throw std::logic_error("SequenceModel::init_state: mixer '" + name +
                             "' does not decode step by step (its registry row says so)");
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
