# Softmax self-attention: the attention op, its flash-style CPU kernel, the SelfAttention
# layer, [model.attention].
seqmix_mixer_sources(attention.cpp self_attention.cpp mixer.cpp op_cases.cpp)
seqmix_mixer_plain_sources(cpu/attention_kernel.cpp)
seqmix_isa_kernels(seqmix mixers/attention/cpu/attention_kernel_impl.h
                   ISAS base avx512 avx512bf16)
