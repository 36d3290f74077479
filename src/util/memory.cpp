#include "seqmix/util/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <malloc.h>

#include <atomic>
#include <limits>

namespace seqmix::util {

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    auto* ctx = new Context{base_->allocate(n), static_cast<int64_t>(n)};
    const int64_t live = g_live.fetch_add(ctx->bytes) + ctx->bytes;
    int64_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    void* data = ctx->inner.get();
    return {data, ctx, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  struct Context {
    c10::DataPtr inner;  // frees the memory when the context is deleted
    int64_t bytes;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Context*>(p);
    g_live.fetch_sub(ctx->bytes);
    delete ctx;
  }
  c10::Allocator* base_;
};

}  // namespace

void install_memory_counter() {
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  static bool installed = false;
  if (installed) return;
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  installed = true;
}

int64_t live_tensor_bytes() { return g_live.load(); }
int64_t peak_tensor_bytes() { return g_peak.load(); }
void reset_peak_tensor_bytes() { g_peak.store(g_live.load()); }

void set_heap_policy(HeapPolicy policy) {
  // No trimming of the heap top back to the system: freed memory is reused, not re-faulted.
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  if (policy == HeapPolicy::kCaching) {
    mallopt(M_MMAP_MAX, 0);  // no mmap-backed chunks (unmapped on free, faulted on reuse)
  } else {
    // A fixed threshold: glibc's dynamic one starts at 128 KiB and would map mid-size tensors.
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  }
}

}  // namespace seqmix::util
