// The large-block pool (util::configure_large_block_cache): freed blocks are reused by requests
// of about their size, the pool never holds more than its limit, the oldest go first, small
// requests are not pooled, LibTorch's raw allocation path works through it, and fresh blocks
// are backed by transparent huge pages where the kernel offers them.
#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "seqmix/util/memory.h"

namespace {

constexpr int64_t kMiB = 1024 * 1024;

at::Tensor bytes(int64_t n) { return at::empty({n}, at::kByte); }

class LargeBlockCache : public ::testing::Test {
 protected:
  void SetUp() override { seqmix::util::configure_large_block_cache(kMiB, 8 * kMiB); }
  void TearDown() override { seqmix::util::configure_large_block_cache(kMiB, 0); }
};

TEST_F(LargeBlockCache, ReusesAFreedBlockOfAboutTheSameSize) {
  const int64_t hits = seqmix::util::large_block_cache_hits();
  void* first = nullptr;
  {
    at::Tensor t = bytes(2 * kMiB);
    t.fill_(7);
    first = t.data_ptr();
  }
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 2 * kMiB);
  {
    at::Tensor t = bytes(2 * kMiB - 4096);  // within 1/8 of the block: reused
    EXPECT_EQ(t.data_ptr(), first);
    EXPECT_EQ(seqmix::util::large_block_cache_hits(), hits + 1);
    EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
    t.fill_(3);
    EXPECT_EQ(t.sum().item<int64_t>(), 3 * (2 * kMiB - 4096));
  }
  {
    at::Tensor t = bytes(kMiB + kMiB / 2);  // the 2 MiB block is more than 1/8 too large
    EXPECT_NE(t.data_ptr(), first);
    EXPECT_EQ(seqmix::util::large_block_cache_hits(), hits + 1);
    EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 2 * kMiB);
  }
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 2 * kMiB + kMiB + kMiB / 2);
}

TEST_F(LargeBlockCache, HoldsAtMostItsLimitAndDropsTheOldestFirst) {
  std::vector<void*> order;
  {
    std::vector<at::Tensor> live;
    for (int i = 0; i < 10; ++i) {
      live.push_back(bytes(2 * kMiB));
      order.push_back(live.back().data_ptr());
    }
    EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
    for (auto& t : live) t = at::Tensor();  // freed in allocation order
    EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 8 * kMiB);
  }
  // The four kept are the last four freed.
  const std::set<void*> newest(order.end() - 4, order.end());
  std::vector<at::Tensor> again;
  for (int i = 0; i < 4; ++i) {
    again.push_back(bytes(2 * kMiB));
    EXPECT_EQ(newest.count(again.back().data_ptr()), 1u) << i;
  }
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
  seqmix::util::configure_large_block_cache(kMiB, 4 * kMiB);
  again.clear();
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 4 * kMiB);
  seqmix::util::configure_large_block_cache(kMiB, kMiB);  // shrinking the limit releases
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
}

TEST_F(LargeBlockCache, SmallRequestsAndRawAllocationsPassThrough) {
  { at::Tensor t = bytes(kMiB - 1); }
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
  c10::Allocator* a = c10::GetCPUAllocator();
  void* small = a->raw_allocate(4096);
  void* large = a->raw_allocate(3 * kMiB);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  static_cast<char*>(large)[3 * kMiB - 1] = 1;
  a->raw_deallocate(small);
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
  a->raw_deallocate(large);
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 3 * kMiB);
}

TEST_F(LargeBlockCache, RejectsBadLimits) {
  EXPECT_THROW(seqmix::util::configure_large_block_cache(0, kMiB), std::invalid_argument);
  EXPECT_THROW(seqmix::util::configure_large_block_cache(kMiB, -1), std::invalid_argument);
}

TEST_F(LargeBlockCache, ReleaseFreeHeapEmptiesThePoolAndKeepsItsLimit) {
  { bytes(2 * kMiB).fill_(1); }
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 2 * kMiB);
  seqmix::util::release_free_heap();
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 0);
  EXPECT_EQ(seqmix::util::large_block_cache_limit(), 8 * kMiB);
  { bytes(3 * kMiB).fill_(1); }  // and it pools again
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 3 * kMiB);
}

// `seqmix bench` counts tensor bytes in front of the pool: both see every block.
TEST_F(LargeBlockCache, CountingAllocatorInFrontOfThePool) {
  seqmix::util::install_memory_counter();
  const int64_t live = seqmix::util::live_tensor_bytes();
  const int64_t hits = seqmix::util::large_block_cache_hits();
  void* first = nullptr;
  {
    at::Tensor t = bytes(2 * kMiB);
    first = t.data_ptr();
    EXPECT_EQ(seqmix::util::live_tensor_bytes() - live, 2 * kMiB);
  }
  EXPECT_EQ(seqmix::util::live_tensor_bytes(), live);
  EXPECT_EQ(seqmix::util::large_block_cache_bytes(), 2 * kMiB);
  at::Tensor again = bytes(2 * kMiB);
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(seqmix::util::large_block_cache_hits(), hits + 1);
}

// The benchmark policy lets the pool hold up to physical memory unless the environment
// sets a limit; the training policy keeps its default.
TEST(HeapPolicy, RepeatingPoolHoldsPhysicalMemoryUnlessTheEnvironmentSaysOtherwise) {
  unsetenv("SEQMIX_LARGE_BLOCK_CACHE_MIB");
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kRepeating);
  EXPECT_EQ(seqmix::util::large_block_cache_limit(), ram);
  seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kBounded);
  EXPECT_EQ(seqmix::util::large_block_cache_limit(), seqmix::util::large_block_cache_limit_from_env());
  EXPECT_LE(seqmix::util::large_block_cache_limit(), int64_t{2} << 30);
  setenv("SEQMIX_LARGE_BLOCK_CACHE_MIB", "64", 1);
  seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kRepeating);
  EXPECT_EQ(seqmix::util::large_block_cache_limit(), 64 * kMiB);
  unsetenv("SEQMIX_LARGE_BLOCK_CACHE_MIB");
  seqmix::util::configure_large_block_cache(kMiB, 0);
}

// A training-shaped workload: autograd through large activations gives the same gradients
// as without the pool, and the second step is served from it.
TEST_F(LargeBlockCache, AutogradStepsAreServedFromThePool) {
  seqmix::util::configure_large_block_cache(kMiB, 64 * kMiB);
  torch::manual_seed(0);
  at::Tensor w = torch::randn({256, 256}, torch::requires_grad());
  at::Tensor x = torch::randn({2048, 256});
  std::vector<at::Tensor> grads;
  const int64_t hits = seqmix::util::large_block_cache_hits();
  for (int step = 0; step < 2; ++step) {
    at::Tensor y = torch::gelu(torch::matmul(x, w)).pow(2).sum();
    y.backward();
    grads.push_back(w.grad().clone());
    w.grad().zero_();
  }
  EXPECT_GT(seqmix::util::large_block_cache_hits(), hits);
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

// Bytes of anonymous memory of this process on transparent huge pages.
int64_t anon_huge_page_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "AnonHugePages:") {
      in >> kib;
      return kib * 1024;
    }
    in.ignore(4096, '\n');
  }
  return 0;
}

TEST_F(LargeBlockCache, FreshBlocksGetTransparentHugePages) {
  const std::string mode = seqmix::util::transparent_huge_pages_mode();
  if (mode != "madvise" && mode != "always")
    GTEST_SKIP() << "the kernel offers no transparent huge pages here (mode '" << mode << "')";
  const int64_t before = anon_huge_page_bytes();
  at::Tensor t = bytes(64 * kMiB);  // no pooled block of this size: a fresh one
  t.fill_(1);                       // the first touch faults the pages in
  // At least the 2 MiB-aligned part of the block (62 MiB or more), give or take what the rest
  // of the process did meanwhile; with 4 KiB pages this stays at `before`.
  EXPECT_GE(anon_huge_page_bytes() - before, 32 * kMiB);
  EXPECT_EQ(t.sum().item<int64_t>(), 64 * kMiB);
}

TEST(TransparentHugePages, ModeIsTheBracketedWordOfTheKernelSetting) {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!in || !std::getline(in, line)) {
    EXPECT_EQ(seqmix::util::transparent_huge_pages_mode(), "");
    return;
  }
  const std::string mode = seqmix::util::transparent_huge_pages_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never") << mode;
  EXPECT_NE(line.find("[" + mode + "]"), std::string::npos) << line;
}

}  // namespace
