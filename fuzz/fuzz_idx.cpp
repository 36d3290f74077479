// The IDX reader (plain or gzip), as images (rank 3) and as labels (rank 1).
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/data/fashion_mnist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "input.idx", data, size);
  for (int rank : {1, 3}) {
    try {
      (void)seqmix::data::read_idx(path, rank);
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
