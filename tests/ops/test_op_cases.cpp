// Every op case of the registry (src/mixers/<name>/op_cases.cpp) through the shared checker
// (support/op_check.h): forward and every gradient against the op's reference, float64
// finite differences, float32 accuracy relative to the reference, padded rows. An op a mixer
// adds is checked here with no edit. The AIB scan and attention run the same check in their
// own suites, with the kernel variants only they have (test_aib_scan.cpp, test_attention.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "seqmix/ops/op_cases.h"
#include "support/op_check.h"

namespace {

bool has_own_suite(const std::string& op) { return op == "aib_scan" || op == "attention"; }

std::vector<seqmix::ops::OpCase> cases() {
  std::vector<seqmix::ops::OpCase> out;
  for (const auto& c : seqmix::ops::op_cases())
    if (!has_own_suite(c.op)) out.push_back(c);
  return out;
}

class OpCase : public ::testing::TestWithParam<seqmix::ops::OpCase> {};

TEST_P(OpCase, KernelMatchesReference) { seqmix::testing::check_op_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Registry, OpCase, ::testing::ValuesIn(cases()),
                         seqmix::testing::op_case_test_name);

}  // namespace
