// generate: loads a model that seqmix trained and continues a prompt with it.
//
//   generate RUN [PROMPT] [MAX_NEW_TOKENS] [TEMPERATURE]
//
// RUN is a run folder (train_lm's, or `seqmix train --out`'s) or a checkpoint file in one.
// The checkpoint holds everything needed: the configuration the model is built from, its
// weights and its tokenizer (bytes or SentencePiece), so no other file is read. The text goes
// to stdout as it is generated; a line of statistics goes to stderr.
#include <seqmix/generate/sampler.h>
#include <seqmix/models/sequence_model.h>
#include <seqmix/train/serialization/checkpoint.h>
#include <seqmix/train/configuration/config.h>
#include <seqmix/util/threads.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <system_error>

namespace {

constexpr const char* kUsage =
    "usage: generate RUN [PROMPT] [MAX_NEW_TOKENS] [TEMPERATURE]\n"
    "  RUN             a run folder or its checkpoint.pt\n"
    "  PROMPT          text to continue, default \"The \"\n"
    "  MAX_NEW_TOKENS  tokens to generate (bytes for a byte-level model), default 200\n"
    "  TEMPERATURE     0 = always the most likely token, default 0.8\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "generate: error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string run = argv[1];
  const std::string prompt = argc > 2 ? argv[2] : "The ";

  int64_t max_new_tokens = 200;
  if (argc > 3) {
    const std::string text = argv[3];
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, max_new_tokens);
    if (ec != std::errc() || ptr != end || max_new_tokens < 0 || max_new_tokens > 1000000)
      return fail("MAX_NEW_TOKENS must be an integer in [0, 1000000], got '" + text + "'");
  }

  // Sampling: temperature, then nucleus sampling (the smallest set of tokens holding 95% of
  // the probability), which keeps the rare nonsense tokens out of a small model's text.
  seqmix::generate::SamplingOptions sampling;
  sampling.temperature = 0.8;
  sampling.top_p = 0.95;
  if (argc > 4) {
    char* end = nullptr;
    sampling.temperature = std::strtod(argv[4], &end);
    if (end == argv[4] || *end != '\0')
      return fail(std::string("TEMPERATURE must be a number, got '") + argv[4] + "'");
  }

  bool printed = false;  // the prompt is on stdout: end its line before an error
  try {
    // Range checks for the sampling options (a negative or NaN temperature, ...), before
    // anything is loaded.
    seqmix::generate::validate(sampling);

    // Open the checkpoint once: its archive and contents are verified here, so a corrupt or
    // foreign file is an error naming it, and the configuration, tokenizer and weights are
    // then read from that one parse. (seqmix::train::load_run in train/resolve.h does the
    // next steps in one call; they are spelled out here to show what a checkpoint holds.)
    seqmix::train::CheckpointFile checkpoint(seqmix::train::find_checkpoint(run));
    const seqmix::train::RunConfig& config = checkpoint.config();
    config.check_resources(/*training=*/false);  // refuses a model too large for this machine
    const seqmix::data::Tokenizer tokenizer = checkpoint.tokenizer();

    // Build the model the configuration describes, then fill in its weights (every tensor
    // stored must match one of the model's, and the reverse).
    seqmix::models::SequenceModel model(config.model);
    checkpoint.load(model, /*optimizer=*/nullptr);
    checkpoint.close();  // frees the parsed archive; the model holds its own copy
    model->eval();

    // One token's work is too small to share between threads: one thread is the fastest
    // (generate/sampler.h has the measurements).
    seqmix::util::configure_threads(seqmix::generate::generate_threads(0));

    // Incremental decoding: the prompt is fed once, then each new token costs one step of
    // every layer. The callback receives the text as it grows (whole UTF-8 characters).
    std::fputs(prompt.c_str(), stdout);
    printed = true;
    seqmix::generate::GenerationStats stats;
    const uint64_t seed = 7;  // the same seed, prompt and options give the same text
    seqmix::generate::generate_text(
        model, tokenizer, prompt, max_new_tokens, sampling, seed,
        [](const std::string& piece) {
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        },
        &stats);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "generate: %s\n", seqmix::generate::describe(stats).c_str());
    return 0;
  } catch (const std::exception& e) {
    if (printed) std::fputc('\n', stdout);
    std::fflush(stdout);
    return fail(e.what());
  }
}
