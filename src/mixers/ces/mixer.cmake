# ETSMLP's complex exponential smoothing: the ces_scan op, its CPU kernel, the CES and ESMLP
# layers, [model.ces] (mixer "etsmlp").
seqmix_mixer_op_sources(ces_scan.cpp)
seqmix_mixer_sources(ces.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/ces_scan_kernel.cpp)
seqmix_mixer_cuda_sources(cuda/ces_scan_cuda.cu)
seqmix_isa_kernels(${SEQMIX_OPS_TARGET} mixers/ces/cpu/ces_scan_kernel_impl.h ISAS base avx512
                   FLAGS -mprefer-vector-width=512)
