// Config files: the TOML parser, key and type checks, and validation of every value.
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)seqmix::train::RunConfig::from_toml(text, "fuzz");
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "config.toml", data, size);
  try {
    (void)seqmix::train::resolve_config(path, {});
  } catch (const std::runtime_error&) {
  }
  return 0;
}
