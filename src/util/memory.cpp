#include "seqmix/util/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace seqmix::util {

namespace {

constexpr const char* kPoolEnv = "SEQMIX_LARGE_BLOCK_CACHE_MIB";
// glibc's largest mmap threshold: kBounded maps requests from this size up, and pools them.
constexpr int64_t kLarge = 32 * 1024 * 1024;

std::atomic<int64_t> g_live{0}, g_peak{0};

}  // namespace

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return physical_memory_bytes();
}

void check_available_memory(double bytes, const std::string& what, const std::string& hint) {
  const double have = static_cast<double>(available_memory_bytes());
  if (have <= 0 || bytes <= 0.9 * have) return;
  throw std::runtime_error(fmt::format(
      "{} needs about {:.1f} GiB of memory, more than the {:.1f} GiB available (MemAvailable){}",
      what, bytes / (1 << 30), have / (1 << 30), hint));
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * page;
}

namespace {

// Blocks are found again by their address (data == context), so LibTorch's raw_allocate /
// raw_deallocate, used inside some ATen kernels, work through it too.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    // c10 hands out no memory for 0 bytes (data == nullptr), and a DataPtr whose context is
    // null never calls its deleter: keep such blocks out of the map, or their Context leaks.
    if (n == 0) return base_->allocate(0);
    auto* ctx = new Context{base_->allocate(n), static_cast<int64_t>(n)};
    const int64_t live = g_live.fetch_add(ctx->bytes) + ctx->bytes;
    int64_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    void* data = ctx->inner.get();
    {
      std::lock_guard<std::mutex> lock(mu());
      blocks().emplace(data, ctx);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Context {
    c10::DataPtr inner;  // frees the memory when the context is deleted
    int64_t bytes;
  };
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Context*>& blocks() {
    static auto* m = new std::unordered_map<void*, Context*>();  // outlives static tensors
    return *m;
  }
  static void release(void* data) {
    Context* ctx = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu());
      auto it = blocks().find(data);
      if (it == blocks().end()) return;  // not ours: never handed out by allocate()
      ctx = it->second;
      blocks().erase(it);
    }
    g_live.fetch_sub(ctx->bytes);
    delete ctx;
  }
  c10::Allocator* base_;
};

// Asks the kernel to back a fresh, untouched block with transparent huge pages where it can
// (the 2 MiB-aligned part of it). Each first touch of a 4 KiB page is a fault, and on a
// paravirtualised host the faults of a step's new attention scores cost more than the step's
// arithmetic; 2 MiB pages take 512 times fewer. Advice only: without THP (or with THP set to
// "never") nothing changes.
void advise_huge_pages(void* data, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + n) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Free large blocks by size (best fit) and by age (eviction); a block is in both or in neither.
// Blocks handed out are found again by their address: LibTorch's raw_allocate/raw_deallocate
// (used inside some ATen kernels) need data == context and one deleter for every block.
class LargeBlockCache;
LargeBlockCache* g_cache = nullptr;

class LargeBlockCache final : public c10::Allocator {
 public:
  explicit LargeBlockCache(c10::Allocator* base) : base_(base) {}

  void configure(int64_t min_bytes, int64_t max_cached) {
    std::lock_guard<std::mutex> lock(mu_);
    min_bytes_.store(min_bytes);
    max_cached_ = max_cached;
    evict_locked(max_cached_);
  }

  // Returns every pooled block to the system; the limits stay.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    evict_locked(0);
  }

  c10::DataPtr allocate(size_t n) override {
    if (static_cast<int64_t>(n) < min_bytes_.load()) return base_->allocate(n);
    Block* b = take_pooled(n);
    if (!b) {
      // Outside the lock: the system call and the advice do not hold up other threads.
      b = new Block{base_->allocate(n), n, {}, {}};
      advise_huge_pages(b->inner.get(), n);
    }
    void* data = b->inner.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_.emplace(data, b);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  int64_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  int64_t hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
  }
  int64_t max_cached() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_cached_;
  }

 private:
  struct Block {
    c10::DataPtr inner;  // returns the memory to the base allocator when destroyed
    size_t size;
    // Its places in the two indexes while it is pooled.
    std::list<Block*>::iterator age;
    std::multimap<size_t, Block*>::iterator by_size;
  };

  // The smallest pooled block that holds n bytes and is at most 1/8 larger, taken out of the
  // pool; nullptr if there is none.
  Block* take_pooled(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_size_.lower_bound(n);
    if (it == by_size_.end() || it->first > n + n / 8) return nullptr;
    Block* b = it->second;
    by_size_.erase(it);
    by_age_.erase(b->age);
    cached_ -= static_cast<int64_t>(b->size);
    ++hits_;
    return b;
  }

  // A pooled block goes back to the pool; anything else came from the base allocator.
  static void release(void* data) {
    if (!g_cache->keep(data)) g_cache->base_->raw_deleter()(data);
  }

  bool keep(void* data) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = out_.find(data);
    if (it == out_.end()) return false;
    Block* b = it->second;
    out_.erase(it);
    by_age_.push_back(b);
    b->age = std::prev(by_age_.end());
    b->by_size = by_size_.emplace(b->size, b);
    cached_ += static_cast<int64_t>(b->size);
    evict_locked(max_cached_);
    return true;
  }

  // Oldest first, until the pool holds at most `limit` bytes.
  void evict_locked(int64_t limit) {
    while (cached_ > limit && !by_age_.empty()) {
      Block* b = by_age_.front();
      by_age_.pop_front();
      by_size_.erase(b->by_size);
      cached_ -= static_cast<int64_t>(b->size);
      delete b;
    }
  }

  c10::Allocator* base_;
  std::atomic<int64_t> min_bytes_{std::numeric_limits<int64_t>::max()};
  int64_t max_cached_ = 0;
  mutable std::mutex mu_;
  mutable std::multimap<size_t, Block*> by_size_;
  mutable std::list<Block*> by_age_;
  mutable std::unordered_map<void*, Block*> out_;
  mutable int64_t cached_ = 0, hits_ = 0;
};


}  // namespace

void configure_large_block_cache(int64_t min_bytes, int64_t max_cached_bytes) {
  if (min_bytes < 1 || max_cached_bytes < 0)
    throw std::invalid_argument("configure_large_block_cache: min_bytes must be >= 1 and "
                                "max_cached_bytes >= 0, got " + std::to_string(min_bytes) +
                                " and " + std::to_string(max_cached_bytes));
  // Never destroyed: tensors that outlive main() still return their blocks to it.
  static LargeBlockCache* cache = new LargeBlockCache(c10::GetDefaultCPUAllocator());
  static std::once_flag installed;
  std::call_once(installed, [] {
    c10::SetCPUAllocator(cache, /*priority=*/50);
    g_cache = cache;
  });
  cache->configure(min_bytes, max_cached_bytes);
}

int64_t large_block_cache_bytes() { return g_cache ? g_cache->cached_bytes() : 0; }
int64_t large_block_cache_hits() { return g_cache ? g_cache->hits() : 0; }
int64_t large_block_cache_limit() { return g_cache ? g_cache->max_cached() : 0; }

int64_t large_block_cache_limit_from_env() {
  const char* env = std::getenv(kPoolEnv);
  if (!env) {
    // With huge pages a fresh block costs little more than a pooled one (docs/BENCHMARKS.md,
    // "Huge pages for large blocks"): 2 GiB keeps most of the pool's gain, and two runs can
    // share a machine.
    return std::clamp<int64_t>(physical_memory_bytes() / 4, 0, int64_t{2} << 30);
  }
  const std::string text(env);
  // Whole MiB, at most 2^40 (a petabyte): no sign, no suffix, no overflow when scaled.
  const bool digits = !text.empty() && text.size() <= 13 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int64_t mib = digits ? std::stoll(text) : -1;
  if (mib < 0 || mib > (int64_t{1} << 40))
    throw std::invalid_argument(std::string(kPoolEnv) +
                                ": expected a whole number of MiB (0 turns the large-block pool "
                                "off), got '" + text + "'");
  // A pool larger than the machine could never fill: a mistyped value, refused.
  const int64_t physical_mib = physical_memory_bytes() >> 20;
  if (physical_mib > 0 && mib > physical_mib)
    throw std::invalid_argument(fmt::format(
        "{} is {} MiB, more than this machine's {} MiB of memory (the large-block pool's limit; "
        "0 turns it off)",
        kPoolEnv, mib, physical_mib));
  return mib << 20;
}

void install_memory_counter() {
  static CountingAllocator counting(c10::GetCPUAllocator());
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
  // A fixed threshold: glibc's dynamic one starts at 128 KiB and would map mid-size tensors.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLarge));
  const bool all = policy == HeapPolicy::kRepeating && !std::getenv(kPoolEnv);
  configure_large_block_cache(kLarge, all ? physical_memory_bytes() : large_block_cache_limit_from_env());
}

void release_free_heap() {
  if (g_cache) g_cache->release_cached();
  malloc_trim(0);
}

std::string transparent_huge_pages_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  // "always [madvise] never": the bracketed word is the mode in force.
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return line.substr(open + 1, close - open - 1);
}

std::string large_block_pool_description() {
  const int64_t mib = large_block_cache_limit() >> 20;
  const char* env = std::getenv(kPoolEnv);
  std::string text =
      mib > 0 ? fmt::format("freed tensors of >= {} MiB kept for reuse, up to {} MiB", kLarge >> 20, mib)
              : std::string("off");
  text += env ? fmt::format(" ({}={})", kPoolEnv, env)
              : fmt::format(" (default; {} sets it)", kPoolEnv);
  const std::string thp = transparent_huge_pages_mode();
  if (thp == "always" || thp == "madvise")
    text += fmt::format("; large blocks on 2 MiB transparent huge pages (THP mode {})", thp);
  else
    text += fmt::format("; no transparent huge pages ({}): every 4 KiB page of a fresh block faults",
                        thp.empty() ? "not available" : "THP mode " + thp);
  return text;
}

}  // namespace seqmix::util
