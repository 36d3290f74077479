// The counting allocator of `seqmix bench` (util::install_memory_counter): live and peak bytes
// follow tensor lifetimes, and LibTorch's raw allocation path works through it (ATen kernels
// such as GELU use it). Its own process: the counter replaces the CPU allocator for good.
#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "seqmix/util/memory.h"

namespace {

TEST(MemoryCounter, CountsLiveAndPeakBytesAndServesRawAllocations) {
  seqmix::util::install_memory_counter();
  const int64_t base = seqmix::util::live_tensor_bytes();
  seqmix::util::reset_peak_tensor_bytes();
  {
    at::Tensor a = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    EXPECT_EQ(seqmix::util::live_tensor_bytes(), base + (4 << 20));
    {
      at::Tensor b = at::empty({1 << 18}, at::kFloat);  // 1 MiB
      EXPECT_EQ(seqmix::util::live_tensor_bytes(), base + (5 << 20));
    }
    EXPECT_EQ(seqmix::util::live_tensor_bytes(), base + (4 << 20));
  }
  EXPECT_EQ(seqmix::util::live_tensor_bytes(), base);
  EXPECT_EQ(seqmix::util::peak_tensor_bytes(), base + (5 << 20));

  // Empty tensors own no memory; under LeakSanitizer this also checks that nothing is kept.
  for (int i = 0; i < 3; ++i) {
    at::Tensor e = at::empty({0}, at::kFloat);
    EXPECT_EQ(seqmix::util::live_tensor_bytes(), base);
  }

  c10::Allocator* alloc = c10::GetCPUAllocator();
  void* raw = alloc->raw_allocate(1000);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(seqmix::util::live_tensor_bytes(), base + 1000);
  alloc->raw_deallocate(raw);
  EXPECT_EQ(seqmix::util::live_tensor_bytes(), base);

  at::Tensor x = torch::randn({64, 64}, torch::requires_grad());
  torch::gelu(x).sum().backward();  // aborted when the counter had no raw deleter
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

}  // namespace
