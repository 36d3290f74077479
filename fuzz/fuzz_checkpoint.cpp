// The checkpoint loader: configuration, tokenizer record, weights and optimizer state.
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "checkpoint.pt", data, size);
  try {
    const auto config = seqmix::train::read_checkpoint_config(path);
    // SentencePiece runs in a plugin loaded with RTLD_DEEPBIND, which AddressSanitizer
    // refuses; its model loader has its own target (fuzz_tokenizer).
    if (config.data.tokenizer == "bytes") (void)seqmix::train::read_checkpoint_tokenizer(path);
    // A configuration is only a promise: building a huge model from a corrupt one would
    // test the allocator, not the loader.
    if (config.model.num_parameters() < 2'000'000) {
      seqmix::models::SequenceModel model(config.model);
      (void)seqmix::train::load_checkpoint(path, model, nullptr);
    }
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
