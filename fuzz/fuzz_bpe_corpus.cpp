// The BPE side of the corpus loader: arbitrary corpus text encoded with a BPE model trained by
// `seqmix tokenizer train` (path in $SEQMIX_FUZZ_BPE_MODEL; scripts/fuzz.sh makes one), through
// the same plugin entry points seqmix calls, linked directly as in fuzz_tokenizer. Besides
// memory errors it checks the promise of tokenizer.h: decode(encode(text)) == text for valid
// UTF-8 text, and every id within the vocabulary.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "spm_api.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_bpe_corpus: %s\n", what.c_str());
  std::abort();
}

void* model() {
  static void* m = [] {
    const char* path = std::getenv("SEQMIX_FUZZ_BPE_MODEL");
    if (!path) die("set SEQMIX_FUZZ_BPE_MODEL to a model from `seqmix tokenizer train`");
    std::ifstream in(path, std::ios::binary);
    const std::string proto((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    void* loaded = nullptr;
    char* err = nullptr;
    if (!in.good() && !in.eof()) die(std::string("cannot read ") + path);
    if (seqmix_spm_load(proto.data(), proto.size(), &loaded, &err) != 0)
      die(std::string(path) + ": " + (err ? err : "not a SentencePiece model"));
    return loaded;
  }();
  return m;
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  void* m = model();
  const int vocab = seqmix_spm_size(m);
  int32_t* ids = nullptr;
  size_t n_ids = 0;
  char* err = nullptr;
  if (seqmix_spm_encode(m, reinterpret_cast<const char*>(data), size, &ids, &n_ids, &err) != 0) {
    // Encoding never fails on text: byte fallback covers every byte.
    die(std::string("encode failed: ") + (err ? err : "?"));
  }
  for (size_t i = 0; i < n_ids; ++i)
    if (ids[i] < 0 || ids[i] >= vocab) die("id out of range: " + std::to_string(ids[i]));
  char* text = nullptr;
  size_t n_text = 0;
  if (seqmix_spm_decode(m, ids, n_ids, &text, &n_text, &err) != 0)
    die(std::string("decode failed: ") + (err ? err : "?"));
  if (valid_utf8(data, size) &&
      (n_text != size || (size > 0 && std::memcmp(text, data, size) != 0)))
    die("decode(encode(text)) != text for valid UTF-8 of " + std::to_string(size) + " bytes");
  seqmix_spm_free(text);
  seqmix_spm_free(ids);
  return 0;
}
