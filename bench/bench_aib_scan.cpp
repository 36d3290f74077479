// Google Benchmark micro-benchmarks: the fused AIB scan kernel alone (one thread,
// preallocated buffers), and every op of the op-case registry through autograd, kernel and
// reference (all threads). Shapes: B = 4, D = 512.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <thread>

#include "../src/mixers/aib/cpu/aib_scan_kernel.h"
#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/op_cases.h"

namespace {

constexpr int64_t kB = 4, kD = 512;

struct Buffers {
  at::Tensor a, v, lw, o, go, ga, gv, glw, scratch;
  seqmix::ops::cpu::AIBScanParams<float> p;
  int64_t items;
};

Buffers make(int64_t L, bool backward) {
  Buffers b;
  const int64_t K = L > 1 ? seqmix::ops::aib_num_levels(L) : 0;
  b.a = at::randn({kB, L, kD});
  b.v = at::randn({kB, L, kD});
  b.lw = at::randn({std::max<int64_t>(K, 1), kD}).cumsum(0);
  b.o = at::empty_like(b.a);
  b.go = at::randn_like(b.a);
  b.ga = at::empty_like(b.a);
  b.gv = at::empty_like(b.a);
  b.glw = at::zeros({kB, K, kD}, at::kDouble);
  constexpr int64_t lanes = seqmix::ops::cpu::aib_lanes<float>();
  b.scratch =
      at::empty({seqmix::ops::cpu::aib_scratch_bytes(L, K, lanes, 4, backward) + 64}, at::kByte);
  auto& p = b.p;
  p.a = b.a.data_ptr<float>();
  p.v = b.v.data_ptr<float>();
  p.lw = b.lw.data_ptr<float>();
  p.o = b.o.data_ptr<float>();
  p.grad_o = b.go.data_ptr<float>();
  p.grad_a = b.ga.data_ptr<float>();
  p.grad_v = b.gv.data_ptr<float>();
  p.grad_lw = b.glw.data_ptr<double>();
  p.B = kB;
  p.L = L;
  p.D = kD;
  p.K = K;
  b.items = seqmix::ops::cpu::aib_work_items(kB, kD, false, lanes);
  return b;
}

void* aligned(at::Tensor& t) {
  auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  return reinterpret_cast<void*>((addr + 63) & ~uintptr_t{63});
}

void BM_KernelForward1T(benchmark::State& state) {
  Buffers b = make(state.range(0), false);
  for (auto _ : state)
    seqmix::ops::cpu::aib_scan_forward<float>(b.p, 0, b.items, aligned(b.scratch));
  state.SetBytesProcessed(state.iterations() * 3 * 4 * kB * state.range(0) * kD);
}

void BM_KernelForwardAllThreads(benchmark::State& state) {
  at::set_num_threads(static_cast<int>(state.range(1)));
  Buffers b = make(state.range(0), false);
  const int64_t bytes = seqmix::ops::cpu::aib_scratch_bytes(state.range(0), b.p.K, 16, 4, false);
  std::vector<at::Tensor> scratch;
  for (int t = 0; t < 8; ++t) scratch.push_back(at::empty({bytes + 64}, at::kByte));
  const int64_t fallbacks = seqmix::ops::cpu::aib_fast_path_fallbacks();
  for (auto _ : state)
    at::parallel_for(0, b.items, 1, [&](int64_t begin, int64_t end) {
      seqmix::ops::cpu::aib_scan_forward<float>(
          b.p, begin, end, aligned(scratch[static_cast<size_t>(at::get_thread_num())]));
    });
  state.SetBytesProcessed(state.iterations() * 3 * 4 * kB * state.range(0) * kD);
  // Blocks that left the fast path (should be 0 for these well-scaled inputs).
  state.counters["fallbacks"] =
      static_cast<double>(seqmix::ops::cpu::aib_fast_path_fallbacks() - fallbacks);
}

void BM_KernelBackward1T(benchmark::State& state) {
  Buffers b = make(state.range(0), true);
  for (auto _ : state)
    seqmix::ops::cpu::aib_scan_backward<float>(b.p, 0, b.items, aligned(b.scratch));
}

// Every op of the registry (ops/op_cases.h), kernel and reference: the op's benchmarked
// configuration at [kB, L, kD], forward and backward through autograd (all threads).
void BM_Op(benchmark::State& state, const seqmix::ops::OpCase& c, seqmix::ops::Backend backend) {
  at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  const seqmix::ops::OpCase s = c.at_shape(kB, state.range(0), kD);
  const seqmix::ops::OpInputs in = s.make_inputs(at::kFloat, 0);
  std::vector<at::Tensor> x;
  for (const auto& i : in.inputs) x.push_back(i.value.detach().requires_grad_(i.requires_grad));
  const seqmix::ops::OpFn& f = s.implementation(backend);
  for (auto _ : state) {
    for (auto& t : x)
      if (t.grad().defined()) t.mutable_grad().reset();
    f(x, in.mask).sum().backward();
  }
}

}  // namespace

BENCHMARK(BM_KernelForward1T)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelForwardAllThreads)
    ->Args({4096, 1})
    ->Args({4096, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_KernelBackward1T)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  for (const auto& c : seqmix::ops::op_cases())
    if (c.benchmarked)
      for (auto backend : {seqmix::ops::Backend::kernel, seqmix::ops::Backend::reference})
        benchmark::RegisterBenchmark(
            ("BM_Op/" + c.op + "_" + seqmix::ops::to_string(backend)).c_str(), BM_Op, c, backend)
            ->Arg(1024)
            ->Arg(4096)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
