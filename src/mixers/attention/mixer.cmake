# Softmax self-attention: the attention op, its flash-style CPU kernel, the SelfAttention
# layer, [model.attention].
seqmix_mixer_op_sources(attention.cpp)
seqmix_mixer_sources(self_attention.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/attention_kernel.cpp)
seqmix_isa_kernels(${SEQMIX_OPS_TARGET} mixers/attention/cpu/attention_kernel_impl.h
                   ISAS base avx512 avx512bf16)
