// The safetensors reader (model.safetensors of a Hugging Face folder): the header's length,
// its JSON, every entry's dtype, shape and offsets. After a file is accepted, every byte of
// every tensor is read (in instrumented code, so AddressSanitizer sees a read past the file).
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/train/serialization/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "model.safetensors", data, size);
  try {
    const auto file = seqmix::train::read_safetensors(path);
    volatile unsigned sum = 0;
    for (const auto& t : file.tensors) {
      const char* bytes = file.data(t);
      for (uint64_t k = 0; k < t.end - t.begin; ++k) sum = sum + static_cast<uint8_t>(bytes[k]);
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
