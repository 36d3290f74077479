#pragma once
/// @file models_bench.h
/// `seqmix bench models`: whole-model training speed and memory against sequence length, the
/// papers' protocol (weird-net Table V and Fig. 5, moss Table IV, etsmlp Fig. 3): every model at
/// the same width and depth, one training step (forward, next-token cross-entropy, backward,
/// AdamW update) on B random byte sequences of length L.
///
/// Models (byte-level language models, causal, built from their presets with the shared
/// shape below):
///   weird-net              Structure B: AIB and softmax attention alternating (weird-net)
///   weird-net-a            Structure A: every layer AIB (the weird-net preset with
///                          model.mixers = ['aib']; the causal form of the LRA encoder)
///   transformer            softmax self-attention in every layer (fused kernel)
///   etsmlp-lm              causal ESMLP blocks (CES inside the MLP, no separate FFN mixer)
///   extractor-transformer  the Extractor in every layer (l = L lag matrices per layer)
///
/// Per model and L: the median step time of `reps` steps after one warm-up step (which also
/// creates AdamW's state), tokens/s = B L / step time, and the peak tensor memory during
/// those steps (util/memory.h's counting allocator: weights, gradients, AdamW moments and
/// activations; not BLAS's own buffers), as MiB and bytes per token. A case whose estimated
/// training memory (RunConfig::estimate_training_memory) exceeds 80% of MemAvailable is
/// skipped with a row saying so, as is an Extractor whose lag matrices alone exceed it.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "seqmix/models/model_config.h"

namespace seqmix::bench {

struct ModelsBenchOptions {
  std::vector<std::string> models = {"weird-net", "weird-net-a", "transformer", "etsmlp-lm",
                                     "extractor-transformer"};
  std::vector<int64_t> lengths = {512, 1024, 2048, 4096, 8192, 16384};
  int64_t batch = 1;     ///< sequences per step
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t d_ff = 1024;   ///< FFN width (ESMLP: its hidden width)
  int64_t n_heads = 4;
  int64_t reps = 3;
  /// "fp32" or "bf16": the training step under bfloat16 autocast (nn/precision.h).
  std::string precision = "fp32";
  /// "cpu", "cuda" or "cuda:N" (util/device.h). On a GPU each timed step ends with a device
  /// synchronisation, and the peak memory is the CUDA caching allocator's peak of allocated
  /// bytes during the timed steps (what torch.cuda.max_memory_allocated reports).
  std::string device = "cpu";
};

/// The names `models` accepts, for help texts.
std::vector<std::string> models_bench_names();

/// The configuration a model row trains: its preset at the shared shape, max_len = L.
/// @throws std::invalid_argument naming an unknown model ("--models: ...", listing the names).
models::ModelConfig models_bench_config(const std::string& name, const ModelsBenchOptions& o,
                                        int64_t L);

/// Checks the sizes (positive, heads dividing D, lengths >= 2), the model names and the device
/// (util::require_device: a CUDA device needs a GPU and seqmix's CUDA kernels) before anything
/// runs; `mode` ("models" or "generate") names the command in the message.
/// @throws std::invalid_argument "bench <mode>: ...", "--models: ..." or "--device ...".
void check_models_bench_options(const ModelsBenchOptions& options, const std::string& mode);

/// Runs the benchmark; `emit` gets one JSON object per model and length as soon as it is
/// measured: "model", "L", "B", "D", "layers", "parameters", "step_ms", "tokens_per_s",
/// "peak_mib", "bytes_per_token", or "skipped" with the reason.
/// @throws std::invalid_argument for an unknown model or a non-positive size.
void run_models_bench(const ModelsBenchOptions& options,
                      const std::function<void(const nlohmann::json&)>& emit);

/// The rows as a table (tokens/s and MiB per model and L), then each model's ratios to the
/// transformer at every L next to the papers' (weird-net Table V: 2.7x the Transformer's
/// speed and 0.50x its memory at 4K).
std::string format_models_table(const std::vector<nlohmann::json>& rows);

/// `seqmix bench generate`: incremental decoding speed against context length, the path
/// `seqmix generate` takes (SequenceModel::step, one token per sequence at a time, no
/// gradients), for the same models at the same shape. It measures the claim of the Extractor
/// paper's Table 4: at context length t a generated token costs one Extractor sublayer
/// t d^2 + 2 d^2 + d multiplications (one D x D lag matrix per earlier position) against
/// 2 t d + 4 d^2 for a self-attention sublayer with its key/value cache. An AIB sublayer
/// caches its two projections of every earlier token, O(t d) per token like attention (its
/// per-distance weights are not geometric, so no fixed-size state gives the same output);
/// a CES sublayer's state does not grow with t.
///
/// Per model: B random token sequences are decoded from position 0 to max(lengths), timing
/// every step. For each L in `lengths`, the row reports the median step time over the
/// `reps` tokens ending at position L (the tokens generated with L - reps .. L - 1 earlier
/// tokens in the state), tokens/s = B / that time, and the decoding state's size after L
/// tokens (the sum of every layer's MixerState tensors: key/value caches, Extractor input
/// histories, AIB's projections and per-distance weights, CES's hidden state), in MiB. A
/// model whose weights exceed 80% of MemAvailable is skipped with a row saying so (the
/// Extractor's max(L) lag matrices per layer grow with L). Rows: "model", "L", "B", "D", "layers", "parameters", "token_ms",
/// "tokens_per_s", "state_mib", or "skipped" with the reason.
/// @throws std::invalid_argument for an unknown model, a non-positive size, or lengths below 2.
void run_generate_bench(const ModelsBenchOptions& options,
                        const std::function<void(const nlohmann::json&)>& emit);

/// The generate rows as a table (ms per token and state MiB per model and L), then each
/// model's time per token relative to the transformer's, next to the multiplications per
/// token of one Extractor sublayer relative to one attention sublayer (extractor Table 4).
std::string format_generate_table(const std::vector<nlohmann::json>& rows);

/// Draws tokens/s and bytes per token against L (log-log, one line per model) into the PNG
/// `path` with gnuplot (train/reporting/plot.h's run_gnuplot).
/// @throws std::runtime_error if gnuplot fails or is missing.
void plot_models_bench(const std::vector<nlohmann::json>& rows, const std::string& path);

}  // namespace seqmix::bench
