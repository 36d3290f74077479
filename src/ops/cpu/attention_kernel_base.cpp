// The fused attention kernels built for the baseline x86-64 instruction set.
#define SEQMIX_ISA base
#include "attention_kernel_impl.h"
