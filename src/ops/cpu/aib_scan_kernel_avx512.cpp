// The fused AIB scan kernels built for AVX-512 (F, DQ, VL, BW); chosen at run time.
#define SEQMIX_ISA avx512
#include "aib_scan_kernel_impl.h"

namespace seqmix::ops::cpu::avx512 {
template void forward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void forward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
template void backward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void backward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
}  // namespace seqmix::ops::cpu::avx512
