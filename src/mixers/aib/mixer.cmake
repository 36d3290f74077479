# AIB (Weird) attention: the aib_scan op, its CPU kernel, the AIBAttention layer, [model.aib].
seqmix_mixer_sources(aib_scan.cpp aib_scan_kernel.cpp aib_attention.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/aib_scan_kernel.cpp)
seqmix_isa_kernels(seqmix mixers/aib/cpu/aib_scan_kernel_impl.h ISAS base avx512)
