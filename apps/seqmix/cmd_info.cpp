// seqmix info: the presets with their parameter counts, and the BLAS in use.
#include <fmt/format.h>

#include "common.h"
#include "seqmix/models/presets.h"
#include "seqmix/util/blas.h"
#include "seqmix/util/memory.h"

namespace seqmix::cli {

namespace {

int run_info() {
  fmt::print("seqmix presets (parameters for a byte-level vocabulary of 256)\n\n");
  fmt::print("{:<12}", "size");
  for (const auto& f : models::family_names()) fmt::print(" {:>13}", f);
  fmt::print("  {:>3} {:>5} {:>5} {:>3} {:>5}  source\n", "N", "D", "d_ff", "H", "L");
  for (const auto& s : models::size_presets()) {
    fmt::print("{:<12}", s.name);
    for (const auto& f : models::family_names()) {
      const auto n = models::make_model_config(f, s.name).num_parameters();
      fmt::print(" {:>12.2f}M", static_cast<double>(n) / 1e6);
    }
    fmt::print("  {:>3} {:>5} {:>5} {:>3} {:>5}  {}\n", s.n_layers, s.d_model, s.d_ff, s.n_heads,
               s.max_len, s.source);
  }
  fmt::print(
      "\nweird-net / aib-net: Structure B (AIB attention in odd layers, self-attention in even)\n"
      "weird-net-a: Structure A (AIB attention in every layer)\n"
      "moss: Structure B, Leaky-ReLU FFN, biases on A and V\n"
      "transformer: softmax self-attention in every layer (GPT-2 style)\n"
      "extractor-transformer: the Extractor in every layer; no LayerNorm, no biases, ReLU FFN\n"
      "transformer-plain: the same stack with self-attention (the Extractor paper's baseline)\n"
      "etsmlp / etsmlp-gate: ETSMLP (-Gate), CES inside an MLP of width d_ff, bidirectional\n"
      "  encoders as in the paper (classification); etsmlp-lm / etsmlp-gate-lm: causal, for\n"
      "  language modelling\n"
      "With a SentencePiece tokenizer (--tokenizer) the embedding and head grow to its size.\n");
  fmt::print("\nBLAS: {}\n", util::blas_description());
  fmt::print("Large-block pool: {}\n", util::large_block_pool_description());
  return 0;
}

}  // namespace

Command add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "list model presets with parameter counts");
  return {cmd, [](char**) { return run_info(); }};
}

}  // namespace seqmix::cli
