#pragma once
// The built-in mixers: one folder of src/mixers each, listed once in SEQMIX_MIXERS
// (CMakeLists.txt). CMake generates these two functions from that list
// (cmake/SeqmixHelpers.cmake, seqmix_add_mixers): each calls, in list order, the functions
// every mixer folder defines in namespace seqmix::mixers::<folder>:
//   models::MixerSpec mixer();                              its registry row (mixer.cpp)
//   void add_op_cases(std::vector<ops::OpCase>& cases);     its op cases (op_cases.cpp)
#include <vector>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/ops/op_cases.h"

namespace seqmix::mixers {

// The registry rows of the built-in mixers (models/mixer_registry.cpp).
std::vector<models::MixerSpec> builtin_mixers();
// Appends every built-in mixer's op cases (ops/op_cases.cpp).
void add_builtin_op_cases(std::vector<ops::OpCase>& cases);

}  // namespace seqmix::mixers
