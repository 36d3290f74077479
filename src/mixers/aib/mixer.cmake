# AIB (Weird) attention: the aib_scan op, its CPU and CUDA kernels, the AIBAttention layer, [model.aib].
seqmix_mixer_op_sources(aib_scan.cpp aib_scan_kernel.cpp)
seqmix_mixer_sources(aib_attention.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/aib_scan_kernel.cpp)
seqmix_mixer_cuda_sources(cuda/aib_scan_cuda.cu)
seqmix_isa_kernels(${SEQMIX_OPS_TARGET} mixers/aib/cpu/aib_scan_kernel_impl.h ISAS base avx512)
