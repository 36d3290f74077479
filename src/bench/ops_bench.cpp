#include "seqmix/bench/ops_bench.h"
#include "seqmix/nn/precision.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <stdexcept>

#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/self_attention.h"
#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/ces_scan.h"
#include "seqmix/ops/op_cases.h"
#include "seqmix/util/memory.h"

namespace seqmix::bench {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median: no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t mem_available_bytes() { return util::available_memory_bytes(); }

namespace {

struct Timing {
  double fwd_ms = 0, fwd_bwd_ms = 0;
  int64_t peak_bytes = 0;
};

// Times `fwd` alone (no autograd graph) and `fwd` + backward, and records the peak tensor
// memory of one forward+backward above what was live before it.
Timing measure(const std::function<at::Tensor(bool)>& fwd, int64_t reps) {
  Timing t;
  auto fwd_only = [&] {
    torch::NoGradGuard no_grad;
    fwd(false);
  };
  auto fwd_bwd = [&] {
    at::Tensor y = fwd(true);
    y.backward(at::ones_like(y));
  };
  // Warm-up, also the memory measurement.
  const int64_t base = util::live_tensor_bytes();
  util::reset_peak_tensor_bytes();
  auto t0 = Clock::now();
  fwd_bwd();
  const double first = ms_since(t0);
  t.peak_bytes = util::peak_tensor_bytes() - base;
  if (first > 5000) reps = std::min<int64_t>(reps, 3);
  std::vector<double> f, fb;
  for (int64_t r = 0; r < reps; ++r) {
    t0 = Clock::now();
    fwd_only();
    f.push_back(ms_since(t0));
    t0 = Clock::now();
    fwd_bwd();
    fb.push_back(ms_since(t0));
  }
  t.fwd_ms = median(f);
  t.fwd_bwd_ms = median(fb);
  return t;
}

// What the attention candidates that form [B, H, L, L] scores add to estimate_bytes.
int64_t score_bytes(int64_t B, int64_t L, int64_t H) { return 3 * B * H * L * L * 4; }

// Rough tensor bytes a layer row needs, to skip what cannot fit instead of crashing (an op
// row's come from its case, OpCase::bench_bytes).
int64_t layer_bytes(const std::string& row, int64_t B, int64_t L, int64_t D) {
  const int64_t bld = B * L * D * 4;
  if (row == "prefix_sum_a" || row == "prefix_sum_b") return 16 * bld;
  if (row == "aib_layer") return 14 * bld;
  if (row == "extractor_fast") return 16 * bld + 8 * L * D * D * 4;
  if (row == "extractor_reference") return 4 * L * bld + 4 * L * D * D * 4;
  // The attention layer: the fused kernel keeps O(B L D); the score-sized candidates add
  // their own (score_bytes).
  return 16 * bld;
}

const std::vector<std::string>& layer_rows() {
  static const std::vector<std::string> names = {"aib_layer",          "attention_layer",
                                                 "extractor_fast",     "extractor_reference",
                                                 "prefix_sum_a",       "prefix_sum_b"};
  return names;
}

// The op rows: "<op>_<backend>" for every op of the registry, with its benchmarked case.
struct OpRow {
  std::string name;
  const ops::OpCase* c;
  ops::Backend backend;
};

const std::vector<OpRow>& op_rows() {
  static const std::vector<OpRow> rows = [] {
    std::vector<OpRow> r;
    for (const auto& c : ops::op_cases())
      if (c.benchmarked)
        for (auto b : {ops::Backend::kernel, ops::Backend::reference})
          r.push_back({c.op + "_" + ops::to_string(b), &c, b});
    return r;
  }();
  return rows;
}

void zero_grads(torch::nn::Module& m, std::vector<at::Tensor>& xs) {
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.mutable_grad().reset();
  for (auto& x : xs)
    if (x.grad().defined()) x.mutable_grad().reset();
}

// One mixer layer on x [B, L, D], input and parameter gradients cleared each run.
// Under bf16 the forward runs under autocast (nn/precision.h), the input staying float32 as
// a block's normalised residual stream is.
// With `all_valid_mask`, the layer gets a [B, L] key-padding mask with every position valid:
// the same result as no mask, but it selects a layer's masked path (SelfAttention's fused
// kernel, which PyTorch's SDPA replaces when no mask is given).
Timing measure_mixer(nn::MixerImpl& layer, int64_t B, int64_t L, int64_t D, int64_t reps,
                     nn::Precision precision, bool all_valid_mask = false) {
  std::vector<at::Tensor> xs = {at::randn({B, L, D}).requires_grad_(true)};
  const at::Tensor mask = all_valid_mask ? at::ones({B, L}, at::kBool) : at::Tensor();
  return measure(
      [&](bool) {
        zero_grads(layer, xs);
        const nn::AutocastGuard autocast(precision);
        return layer.forward(xs[0], mask);
      },
      reps);
}

// Times one op row: the case at [B, L, D], its float32 inputs, every gradient.
// Under bf16, the activations (inputs with a sequence axis) are bfloat16 and the parameters
// float32, as under autocast.
Timing measure_op(const OpRow& row, int64_t B, int64_t L, int64_t D, int64_t reps,
                  nn::Precision precision) {
  const ops::OpCase c = row.c->at_shape(B, L, D);
  const ops::OpInputs in = c.make_inputs(at::kFloat, 0);
  std::vector<at::Tensor> xs;
  for (const auto& i : in.inputs) {
    const bool low = precision == nn::Precision::bf16 && i.seq_dim >= 0;
    xs.push_back((low ? i.value.to(at::kBFloat16) : i.value).detach().requires_grad_(i.requires_grad));
  }
  const ops::OpFn& f = c.implementation(row.backend);
  torch::nn::Module none;
  return measure(
      [&](bool) {
        zero_grads(none, xs);
        return f(xs, in.mask);
      },
      reps);
}

// aib-net Fig. 3: O = prefix(E * V) / prefix(E), E = exp(A), all gradients.
Timing measure_prefix_sum(bool algorithm_b, int64_t B, int64_t L, int64_t D, int64_t reps) {
  std::vector<at::Tensor> xs = {(0.1 * at::randn({B, L, D})).requires_grad_(true),
                                at::randn({B, L, D}).requires_grad_(true)};
  auto prefix = algorithm_b ? &prefix_sum_logdepth : &prefix_sum_sequential;
  torch::nn::Module none;
  return measure(
      [&](bool) {
        zero_grads(none, xs);
        const at::Tensor e = at::exp(xs[0]);
        return prefix(e * xs[1]) / prefix(e);
      },
      reps);
}

}  // namespace

at::Tensor prefix_sum_sequential(const at::Tensor& x) {
  if (x.dim() != 3) throw std::invalid_argument("prefix_sum_sequential: x must be [B, L, D]");
  const int64_t L = x.size(1);
  if (L == 0) return x.clone();
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(L));
  rows.push_back(x.select(1, 0));
  for (int64_t j = 1; j < L; ++j) rows.push_back(rows.back() + x.select(1, j));
  return at::stack(rows, 1);
}

at::Tensor prefix_sum_logdepth(const at::Tensor& x) {
  if (x.dim() != 3) throw std::invalid_argument("prefix_sum_logdepth: x must be [B, L, D]");
  const int64_t L = x.size(1);
  at::Tensor h = x;
  for (int64_t s = 1; s < L; s *= 2)
    h = at::cat({h.narrow(1, 0, s), h.narrow(1, s, L - s) + h.narrow(1, 0, L - s)}, 1);
  return L == 0 ? x.clone() : h;
}

double stream_triad_gbps(int64_t n, int reps) {
  at::Tensor a = at::empty({n}), b = at::rand({n}), c = at::rand({n});
  float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  const float* pc = c.data_ptr<float>();
  const float s = 3.0f;
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + s * pc[i];
    });
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::min(best, sec);  // the first run faults the pages in
  }
  return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

void run_ops_bench(const OpsBenchOptions& o,
                   const std::function<void(const nlohmann::json&)>& emit) {
  const std::vector<std::string> known = ops_bench_names();
  for (const auto& op : o.ops)
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      throw std::invalid_argument("bench: unknown op '" + op + "' (expected " + list + ")");
    }
  if (o.batch < 1 || o.d_model < 2 || o.n_heads < 1 || o.reps < 1 || o.d_model % o.n_heads)
    throw std::invalid_argument("bench: B, D, heads and reps must be positive, heads dividing D");
  for (int64_t L : o.lengths)
    if (L < 1) throw std::invalid_argument("bench: sequence lengths must be positive");
  const nn::Precision precision = nn::parse_precision(o.precision);
  util::install_memory_counter();
  torch::manual_seed(0);
  const double triad = stream_triad_gbps();
  emit({{"op", "stream_triad"}, {"gbps", triad}, {"threads", at::get_num_threads()}});

  const int64_t B = o.batch, D = o.d_model, H = o.n_heads;
  const int64_t max_L = *std::max_element(o.lengths.begin(), o.lengths.end());
  for (int64_t L : o.lengths) {
    for (const auto& given : o.ops) {
      const std::string& op = given;
      // Each case starts on an emptied heap and pool: the free blocks of the triad or of the
      // case before, with other shapes, would only fragment the heap, and they hide memory
      // from MemAvailable, which the skip test reads.
      util::release_free_heap();
      nlohmann::json row = {{"op", op}, {"L", L}, {"B", B}, {"D", D}, {"precision", o.precision}};
      const auto row_of = std::find_if(op_rows().begin(), op_rows().end(),
                                       [&](const OpRow& r) { return r.name == op; });
      const bool op_row = row_of != op_rows().end();
      int64_t need = layer_bytes(op, B, L, D);
      if (op_row && row_of->c->bench_bytes)
        need = row_of->c->bench_bytes(row_of->backend, B, L, D);
      if (need > mem_available_bytes() * 8 / 10) {
        row["skipped"] = fmt::format("needs ~{:.1f} GiB, more than 80% of the {:.1f} GiB available",
                                     static_cast<double>(need) / (1 << 30),
                                     static_cast<double>(mem_available_bytes()) / (1 << 30));
        emit(row);
        continue;
      }
      Timing t;
      if (op_row) {
        try {
          t = measure_op(*row_of, B, L, D, o.reps, precision);
        } catch (const std::invalid_argument& e) {  // a shape the configuration cannot take
          row["skipped"] = e.what();
          emit(row);
          continue;
        }
        if (op == "aib_scan_kernel")
          row["fwd_gbps"] = 3.0 * (precision == nn::Precision::bf16 ? 2.0 : 4.0) *
                            static_cast<double>(B * L * D) / (t.fwd_ms * 1e6);
      } else if (op == "extractor_fast" || op == "extractor_reference") {
        // The whole layer (eqs. 18-20), with l = the longest L of the run.
        nn::Extractor layer(nn::ExtractorOptions(D, max_L).backend(
            op == "extractor_fast" ? ops::Backend::kernel : ops::Backend::reference));
        t = measure_mixer(*layer, B, L, D, o.reps, precision);
      } else if (op == "prefix_sum_a" || op == "prefix_sum_b") {
        if (precision != nn::Precision::fp32) {
          row["skipped"] = "aib-net Fig. 3 is timed in fp32 only";
          emit(row);
          continue;
        }
        t = measure_prefix_sum(op == "prefix_sum_b", B, L, D, o.reps);
      } else if (op == "aib_layer") {
        nn::AIBAttention layer(nn::AIBAttentionOptions(D, max_L));
        t = measure_mixer(*layer, B, L, D, o.reps, precision);
      } else {
        // The fastest softmax attention: seqmix's fused kernel (reached through an all-valid
        // key-padding mask: without one the layer hands the work to SDPA), or either
        // implementation LibTorch offers here (matmul + softmax, i.e. our reference; SDPA).
        Timing best;
        std::string which;
        for (const std::string name :
             {"fused_kernel", "matmul_softmax", "scaled_dot_product_attention"}) {
          if (!which.empty()) util::release_free_heap();  // each candidate starts clean
          if (name != "fused_kernel" &&
              need + score_bytes(B, L, H) > mem_available_bytes() * 8 / 10) {
            row["candidates"][name] = {{"skipped", "its [B, H, L, L] scores do not fit"}};
            continue;
          }
          const ops::Backend backend =
              name == "fused_kernel" ? ops::Backend::kernel : ops::Backend::reference;
          nn::SelfAttention layer(nn::SelfAttentionOptions(D, H)
                                      .use_sdpa(name == "scaled_dot_product_attention")
                                      .backend(backend));
          const Timing ti =
              measure_mixer(*layer, B, L, D, o.reps, precision, name == "fused_kernel");
          row["candidates"][name] = {{"fwd_ms", ti.fwd_ms},
                                     {"fwd_bwd_ms", ti.fwd_bwd_ms},
                                     {"peak_mib", static_cast<double>(ti.peak_bytes) / (1 << 20)}};
          if (which.empty() || ti.fwd_bwd_ms < best.fwd_bwd_ms) {
            best = ti;
            which = name;
          }
        }
        t = best;
        row["impl"] = which;
      }
      row["fwd_ms"] = t.fwd_ms;
      row["fwd_bwd_ms"] = t.fwd_bwd_ms;
      row["peak_mib"] = static_cast<double>(t.peak_bytes) / (1 << 20);
      emit(row);
    }
  }
}

std::vector<std::string> ops_bench_names() {
  std::vector<std::string> names;
  for (const auto& r : op_rows()) names.push_back(r.name);
  names.insert(names.end(), layer_rows().begin(), layer_rows().end());
  return names;
}

std::string format_ops_table(const std::vector<nlohmann::json>& rows) {
  std::string out;
  double triad = 0;
  std::map<std::pair<std::string, int64_t>, nlohmann::json> by;
  std::vector<int64_t> lengths;
  for (const auto& r : rows) {
    if (r["op"] == "stream_triad") {
      triad = r["gbps"].get<double>();
      continue;
    }
    const int64_t L = r["L"].get<int64_t>();
    if (std::find(lengths.begin(), lengths.end(), L) == lengths.end()) lengths.push_back(L);
    by[{r["op"].get<std::string>(), L}] = r;
  }
  out += fmt::format("STREAM triad: {:.1f} GB/s\n\n", triad);
  out += fmt::format("{:<26} {:>6} {:>11} {:>13} {:>10} {:>9}\n", "op", "L", "fwd ms", "fwd+bwd ms",
                     "peak MiB", "fwd GB/s");
  for (const auto& r : rows) {
    if (r["op"] == "stream_triad") continue;
    if (r.contains("skipped")) {
      out += fmt::format("{:<26} {:>6}   skipped: {}\n", r["op"].get<std::string>(),
                         r["L"].get<int64_t>(), r["skipped"].get<std::string>());
      continue;
    }
    out += fmt::format("{:<26} {:>6} {:>11.2f} {:>13.2f} {:>10.1f} {:>9}\n",
                       r["op"].get<std::string>(), r["L"].get<int64_t>(), r["fwd_ms"].get<double>(),
                       r["fwd_bwd_ms"].get<double>(), r["peak_mib"].get<double>(),
                       r.contains("fwd_gbps") ? fmt::format("{:.1f}", r["fwd_gbps"].get<double>())
                                              : std::string("-"));
  }
  auto get = [&](const std::string& op, int64_t L) -> const nlohmann::json* {
    auto it = by.find({op, L});
    return it == by.end() || it->second.contains("skipped") ? nullptr : &it->second;
  };
  out += "\nratios (same run)\n";
  for (int64_t L : lengths) {
    std::string line = fmt::format("L={:<6}", L);
    const auto *f = get("aib_scan_kernel", L), *r = get("aib_scan_reference", L);
    const auto *al = get("aib_layer", L), *at = get("attention_layer", L);
    if (f && r)
      line += fmt::format("  aib reference/kernel fwd+bwd {:.1f}x",
                          r->at("fwd_bwd_ms").get<double>() / f->at("fwd_bwd_ms").get<double>());
    if (f && triad > 0)
      line += fmt::format("  aib kernel fwd {:.0f}% of triad",
                          100 * f->at("fwd_gbps").get<double>() / triad);
    if (al && at)
      line += fmt::format("  attention/aib_layer fwd+bwd {:.1f}x, memory {:.2f}x",
                          at->at("fwd_bwd_ms").get<double>() / al->at("fwd_bwd_ms").get<double>(),
                          al->at("peak_mib").get<double>() / at->at("peak_mib").get<double>());
    const auto *ck = get("ces_scan_kernel", L), *cr = get("ces_scan_reference", L);
    if (ck && cr)
      line += fmt::format("  ces reference/kernel fwd+bwd {:.1f}x",
                          cr->at("fwd_bwd_ms").get<double>() / ck->at("fwd_bwd_ms").get<double>());
    for (const char* op : {"attention", "extractor_conv"}) {
      const auto *k = get(std::string(op) + "_kernel", L),
                 *r = get(std::string(op) + "_reference", L);
      if (k && r)
        line += fmt::format("  {} reference/kernel fwd+bwd {:.1f}x", op,
                            r->at("fwd_bwd_ms").get<double>() / k->at("fwd_bwd_ms").get<double>());
    }
    const auto *ef = get("extractor_fast", L), *er = get("extractor_reference", L);
    if (ef && er)
      line += fmt::format("  extractor reference/fast fwd+bwd {:.1f}x",
                          er->at("fwd_bwd_ms").get<double>() / ef->at("fwd_bwd_ms").get<double>());
    const auto *pa = get("prefix_sum_a", L), *pb = get("prefix_sum_b", L);
    if (pa && pb)
      line += fmt::format("  prefix sum A/B fwd+bwd {:.1f}x, memory {:.2f}x",
                          pa->at("fwd_bwd_ms").get<double>() / pb->at("fwd_bwd_ms").get<double>(),
                          pa->at("peak_mib").get<double>() / pb->at("peak_mib").get<double>());
    if (ef && at)
      line += fmt::format("  attention/extractor_fast fwd+bwd {:.2f}x",
                          at->at("fwd_bwd_ms").get<double>() / ef->at("fwd_bwd_ms").get<double>());
    out += line + "\n";
  }
  if (lengths.size() >= 2) {
    const int64_t lo = *std::min_element(lengths.begin(), lengths.end());
    const int64_t hi = *std::max_element(lengths.begin(), lengths.end());
    for (const char* op : {"aib_scan_kernel", "ces_scan_kernel", "attention_kernel"}) {
      const auto *a = get(op, lo), *b = get(op, hi);
      if (a && b)
        out += fmt::format(
            "{} fwd+bwd t({}) / t({}) = {:.1f} (L ratio {}, L log L ratio {:.1f})\n", op, hi, lo,
            b->at("fwd_bwd_ms").get<double>() / a->at("fwd_bwd_ms").get<double>(), hi / lo,
            static_cast<double>(hi) * std::log2(static_cast<double>(hi)) /
                (static_cast<double>(lo) * std::log2(static_cast<double>(lo))));
    }
  }
  return out;
}

}  // namespace seqmix::bench
