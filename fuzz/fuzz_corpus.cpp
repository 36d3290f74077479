// The byte corpus loader (a text file as a corpus) and its byte-level token stream.
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "corpus.txt", data, size);
  try {
    const auto corpus = seqmix::data::ByteCorpus::load(path, "unused");
    (void)seqmix::data::TokenCorpus::build(corpus, seqmix::data::Tokenizer::bytes());
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
