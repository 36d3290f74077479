# The causal mean: the smallest complete mixer (an op with its reference and a CPU kernel per
# instruction set, a layer, [model.mean], a registry row, op cases), kept as the template
# for a new one (docs/ARCHITECTURE.md, "How to add a mixer").
seqmix_mixer_op_sources(causal_mean.cpp)
seqmix_mixer_sources(layer.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/causal_mean_kernel.cpp)
seqmix_isa_kernels(${SEQMIX_OPS_TARGET} mixers/mean/cpu/causal_mean_kernel_impl.h ISAS base avx512)
