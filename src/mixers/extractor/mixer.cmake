# The Extractor: the extractor_conv op (ATen's FFT, every device), the Extractor layer,
# [model.extractor].
seqmix_mixer_op_sources(extractor_conv.cpp)
seqmix_mixer_sources(extractor.cpp mixer.cpp op_cases.cpp)
