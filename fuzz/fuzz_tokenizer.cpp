// The SentencePiece model loader behind seqmix's tokenizer (src/data/sentencepiece_plugin.cpp),
// linked directly: without LibTorch in the program there is no protobuf clash, so no
// RTLD_DEEPBIND plugin is needed and AddressSanitizer can watch it.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "spm_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  void* model = nullptr;
  char* err = nullptr;
  if (seqmix_spm_load(reinterpret_cast<const char*>(data), size, &model, &err) != 0) {
    seqmix_spm_free(err);
    return 0;
  }
  const char text[] = "The economy grew; \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82 1999.";
  int32_t* ids = nullptr;
  size_t n_ids = 0;
  if (seqmix_spm_encode(model, text, sizeof(text) - 1, &ids, &n_ids, &err) == 0) {
    char* out = nullptr;
    size_t n_out = 0;
    if (seqmix_spm_decode(model, ids, n_ids, &out, &n_out, &err) == 0)
      seqmix_spm_free(out);
    else
      seqmix_spm_free(err);
    seqmix_spm_free(ids);
  } else {
    seqmix_spm_free(err);
  }
  seqmix_spm_unload(model);
  return 0;
}
