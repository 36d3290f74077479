#include "seqmix/nn/mixer.h"

namespace seqmix::nn {

// The out-of-line destructor is the interface's key function: its vtable lives in libseqmix.
MixerImpl::~MixerImpl() = default;

}  // namespace seqmix::nn
