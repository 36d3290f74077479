// The fused attention kernels built for AVX-512 (F, DQ, VL, BW); chosen at run time.
#define SEQMIX_ISA avx512
#include "attention_kernel_impl.h"
