// The C interface of src/data/sentencepiece_plugin.cpp, for the fuzz targets that link it
// directly (seqmix itself reaches it through dlsym; see src/data/tokenizer.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
int seqmix_spm_load(const char* proto, size_t n, void** model, char** err);
void seqmix_spm_unload(void* model);
int seqmix_spm_size(void* model);
int seqmix_spm_encode(void* model, const char* text, size_t n, int32_t** ids, size_t* n_ids,
                      char** err);
int seqmix_spm_decode(void* model, const int32_t* ids, size_t n, char** text, size_t* n_text,
                      char** err);
void seqmix_spm_free(void* p);
}
