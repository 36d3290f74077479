# ETSMLP's complex exponential smoothing: the ces_scan op, its CPU kernel, the CES and ESMLP
# layers, [model.ces] (mixer "etsmlp").
seqmix_mixer_sources(ces_scan.cpp ces.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/ces_scan_kernel.cpp)
seqmix_isa_kernels(seqmix mixers/ces/cpu/ces_scan_kernel_impl.h ISAS base avx512
                   FLAGS -mprefer-vector-width=512)
