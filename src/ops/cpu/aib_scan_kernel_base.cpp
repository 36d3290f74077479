// The fused AIB scan kernels built for the baseline x86-64 instruction set.
#define SEQMIX_ISA base
#include "aib_scan_kernel_impl.h"

namespace seqmix::ops::cpu::base {
template void forward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void forward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
template void backward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void backward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
}  // namespace seqmix::ops::cpu::base
