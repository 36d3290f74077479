#include "seqmix/nn/mixer.h"
// MixerImpl is header-only; this unit keeps the interface's vtable anchored in the library.
