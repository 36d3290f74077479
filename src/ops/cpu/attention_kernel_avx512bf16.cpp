// The fused attention kernels built for AVX-512 with BF16 (Cooperlake, Sapphire Rapids, Zen 4
// and later): the AVX-512 build plus bfloat16 score products (vdpbf16ps) for bfloat16 inputs.
// Chosen at run time for bfloat16 inputs on a CPU that has AVX-512 BF16.
#define SEQMIX_ISA avx512bf16
#define SEQMIX_ATTN_BF16_PRODUCTS 1
#include "attention_kernel_impl.h"
