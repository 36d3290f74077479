#include "seqmix/bench/models_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "seqmix/bench/ops_bench.h"
#include "seqmix/models/presets.h"
#include "seqmix/nn/precision.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/reporting/plot.h"
#include "seqmix/util/device.h"
#include "seqmix/util/memory.h"

namespace seqmix::bench {

std::vector<std::string> models_bench_names() {
  return {"weird-net", "weird-net-a", "transformer", "etsmlp-lm", "extractor-transformer"};
}

models::ModelConfig models_bench_config(const std::string& name, const ModelsBenchOptions& o,
                                        int64_t L) {
  const auto names = models_bench_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw std::invalid_argument("--models: unknown model '" + name + "' (expected " +
                                fmt::format("{}", fmt::join(names, ", ")) + ")");
  // Structure A as a language model: the decoder preset with AIB in every layer (the
  // weird-net-a preset itself is the bidirectional LRA encoder).
  models::ModelConfig c = models::make_model_config(name == "weird-net-a" ? "weird-net" : name,
                                                    "mini");
  if (name == "weird-net-a") c.mixers = {"aib"};
  c.d_model = o.d_model;
  c.n_layers = o.n_layers;
  c.d_ff = o.d_ff;
  c.n_heads = o.n_heads;
  c.max_len = L;
  c.dropout = 0;
  c.validate();
  return c;
}

void check_models_bench_options(const ModelsBenchOptions& o, const std::string& mode) {
  if (o.batch < 1 || o.d_model < 2 || o.n_layers < 1 || o.d_ff < 1 || o.n_heads < 1 ||
      o.reps < 1 || o.d_model % o.n_heads)
    throw std::invalid_argument(fmt::format(
        "bench {}: B, D, layers, d_ff, heads and reps must be positive, heads dividing D", mode));
  if (o.lengths.empty())
    throw std::invalid_argument(fmt::format("bench {}: no sequence length given", mode));
  for (const int64_t L : o.lengths)
    if (L < 2)
      throw std::invalid_argument(fmt::format("bench {}: sequence lengths must be >= 2", mode));
  for (const auto& name : o.models) models_bench_config(name, o, 2);  // names first
  util::require_device(o.device, "--device");
}

namespace {

// Waits for the GPU's queue, so that a host clock around a step measures the step's work and
// not only its launches. Nothing to wait for on the CPU.
void wait_for(const c10::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

// The peak of tensor bytes since the last reset: seqmix's counting allocator on the CPU, the
// CUDA caching allocator's peak of allocated bytes (not its reserved cache) on a GPU.
void reset_peak(const c10::Device& device) {
  if (device.is_cuda())
    c10::getDeviceAllocator(c10::kCUDA)->resetPeakStats(device.index());
  else
    util::reset_peak_tensor_bytes();
}

double peak_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return static_cast<double>(util::peak_tensor_bytes());
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
  return static_cast<double>(
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
          .peak);
}

// A GPU's memory is not the host's: the MemAvailable check applies to the CPU only; on a GPU
// a case that does not fit ends in the allocator's out-of-memory error, reported as skipped.
bool on_cpu(const ModelsBenchOptions& o) { return util::parse_device(o.device, "--device").is_cpu(); }

}  // namespace

void run_models_bench(const ModelsBenchOptions& o,
                      const std::function<void(const nlohmann::json&)>& emit) {
  check_models_bench_options(o, "models");
  const nn::Precision precision = nn::parse_precision(o.precision);
  const c10::Device device = util::parse_device(o.device, "--device");
  util::install_memory_counter();
  for (const int64_t L : o.lengths) {
    for (const auto& name : o.models) {
      util::release_free_heap();
      const models::ModelConfig config = models_bench_config(name, o, L);
      nlohmann::json row = {{"model", name},        {"L", L},
                            {"B", o.batch},         {"D", o.d_model},
                            {"layers", o.n_layers}, {"parameters", config.num_parameters_approx()},
                            {"precision", o.precision}};
      train::RunConfig run;
      run.model = config;
      run.train.batch_size = o.batch;
      const double need = run.estimate_training_memory().total();
      const double have = static_cast<double>(mem_available_bytes());
      if (on_cpu(o) && need > 0.8 * have) {
        row["skipped"] = fmt::format(
            "needs ~{:.1f} GiB (weights, gradients, AdamW state, activations), more than 80% "
            "of the {:.1f} GiB available",
            need / (1 << 30), have / (1 << 30));
        emit(row);
        continue;
      }
      torch::manual_seed(0);
      std::vector<double> ms;
      double peak = 0;
      try {
        models::SequenceModel model(config);
        model->to(device);
        model->train();
        torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4));
        const at::Tensor tokens =
            at::randint(config.vocab_size, {o.batch, L + 1}, at::kLong).to(device);
        const at::Tensor x = tokens.narrow(1, 0, L), y = tokens.narrow(1, 1, L).reshape({-1});
        auto step = [&] {
          opt.zero_grad();
          at::Tensor logits;
          {
            const nn::AutocastGuard autocast(precision);
            logits = model->forward(x).to(at::kFloat);
          }
          at::cross_entropy_loss(logits.reshape({-1, config.vocab_size}), y).backward();
          opt.step();
        };
        step();  // warm-up; creates AdamW's moments
        wait_for(device);
        reset_peak(device);
        for (int64_t r = 0; r < o.reps; ++r) {
          const auto t0 = Clock::now();
          step();
          wait_for(device);
          ms.push_back(ms_since(t0));
        }
        peak = peak_bytes(device);
      } catch (const c10::OutOfMemoryError& e) {
        row["skipped"] = fmt::format("out of memory on {}", o.device);
        emit(row);
        continue;
      }
      const double step_ms = median(ms);
      row["step_ms"] = step_ms;
      row["tokens_per_s"] = static_cast<double>(o.batch * L) / (step_ms / 1e3);
      row["device"] = o.device;
      row["peak_mib"] = peak / (1 << 20);
      row["bytes_per_token"] = peak / static_cast<double>(o.batch * L);
      emit(row);
    }
  }
}

void run_generate_bench(const ModelsBenchOptions& o,
                        const std::function<void(const nlohmann::json&)>& emit) {
  check_models_bench_options(o, "generate");
  const nn::Precision precision = nn::parse_precision(o.precision);
  const c10::Device device = util::parse_device(o.device, "--device");
  std::vector<int64_t> lengths = o.lengths;
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  const int64_t t_max = lengths.back();
  for (const auto& name : o.models) {
    util::release_free_heap();
    const models::ModelConfig config = models_bench_config(name, o, t_max);
    auto row_for = [&](int64_t L) {
      return nlohmann::json{{"model", name},        {"L", L},
                            {"B", o.batch},         {"D", o.d_model},
                            {"layers", o.n_layers}, {"parameters", config.num_parameters_approx()},
                            {"precision", o.precision}};
    };
    const double weights = 4.0 * config.num_parameters_approx();
    const double have = static_cast<double>(mem_available_bytes());
    if (on_cpu(o) && weights > 0.8 * have) {
      for (const int64_t L : lengths) {
        auto row = row_for(L);
        row["skipped"] = fmt::format(
            "its weights need ~{:.1f} GiB at max_len {}, more than 80% of the {:.1f} GiB "
            "available",
            weights / (1 << 30), t_max, have / (1 << 30));
        emit(row);
      }
      continue;
    }
    torch::manual_seed(0);
    models::SequenceModel model(config);
    model->to(device);
    model->eval();
    torch::NoGradGuard no_grad;
    std::vector<nn::MixerState> states = model->init_state(o.batch);
    const at::Tensor tokens =
        at::randint(config.vocab_size, {o.batch, t_max}, at::kLong).to(device);
    std::vector<double> ms;
    size_t next = 0;  // the next entry of `lengths` to report
    for (int64_t t = 0; t < t_max; ++t) {
      const auto t0 = Clock::now();
      {
        const nn::AutocastGuard autocast(precision);
        // The logits are what a sampler reads; computing them is part of a token's cost.
        (void)model->step(tokens.select(1, t), states);
      }
      wait_for(device);
      ms.push_back(ms_since(t0));
      if (t + 1 != lengths[next]) continue;
      // The tokens generated with L - reps .. L - 1 earlier tokens in the state.
      const auto first = ms.end() - std::min<int64_t>(o.reps, t + 1);
      const double token_ms = median(std::vector<double>(first, ms.end()));
      double state_bytes = 0;
      for (const auto& s : states)
        for (const auto& x : s.tensors)
          if (x.defined()) state_bytes += static_cast<double>(x.nbytes());
      auto row = row_for(t + 1);
      row["token_ms"] = token_ms;
      row["tokens_per_s"] = static_cast<double>(o.batch) / (token_ms / 1e3);
      row["state_mib"] = state_bytes / (1 << 20);
      row["device"] = o.device;
      emit(row);
      ++next;
    }
  }
}

namespace {

const nlohmann::json* find_row(const std::vector<nlohmann::json>& rows, const std::string& model,
                               int64_t L) {
  for (const auto& r : rows)
    if (r.value("model", "") == model && r.value("L", int64_t{0}) == L && !r.contains("skipped"))
      return &r;
  return nullptr;
}

std::vector<int64_t> lengths_of(const std::vector<nlohmann::json>& rows) {
  std::vector<int64_t> ls;
  for (const auto& r : rows) {
    const int64_t L = r.value("L", int64_t{0});
    if (std::find(ls.begin(), ls.end(), L) == ls.end()) ls.push_back(L);
  }
  std::sort(ls.begin(), ls.end());
  return ls;
}

std::vector<std::string> models_of(const std::vector<nlohmann::json>& rows) {
  std::vector<std::string> ms;
  for (const auto& r : rows) {
    const std::string m = r.value("model", "");
    if (std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
  }
  return ms;
}

// One metric as a table: a header of lengths, then a line per model ("skipped" where the
// row was); shared by the training and the decoding tables.
std::string metric_block(const std::vector<nlohmann::json>& rows, const std::string& title,
                         const std::string& key, int decimals) {
  const auto lengths = lengths_of(rows);
  std::string out = fmt::format("\n{:<22}", title);
  for (const int64_t L : lengths) out += fmt::format(" {:>9}", L);
  out += "\n";
  for (const auto& m : models_of(rows)) {
    out += fmt::format("{:<22}", m);
    for (const int64_t L : lengths) {
      const auto* r = find_row(rows, m, L);
      out += r ? fmt::format(" {:>9.{}f}", r->at(key).get<double>(), decimals)
               : fmt::format(" {:>9}", "skipped");
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string format_models_table(const std::vector<nlohmann::json>& rows) {
  const auto lengths = lengths_of(rows);
  const auto models = models_of(rows);
  std::string out;
  out += metric_block(rows, "tokens/s", "tokens_per_s", 0);
  out += metric_block(rows, "peak MiB", "peak_mib", 0);
  out += "\nagainst the transformer (speed x, memory x; weird-net Table V at 4K: 2.7x, 0.50x)\n";
  for (const auto& m : models) {
    if (m == "transformer") continue;
    out += fmt::format("{:<22}", m);
    for (const int64_t L : lengths) {
      const auto *r = find_row(rows, m, L), *t = find_row(rows, "transformer", L);
      out += r && t ? fmt::format(" {:>4.2f}x/{:<4.2f}x",
                                  r->at("tokens_per_s").get<double>() /
                                      t->at("tokens_per_s").get<double>(),
                                  r->at("peak_mib").get<double>() / t->at("peak_mib").get<double>())
                    : fmt::format(" {:>11}", "-");
    }
    out += "\n";
  }
  return out;
}

std::string format_generate_table(const std::vector<nlohmann::json>& rows) {
  const auto lengths = lengths_of(rows);
  const auto models = models_of(rows);
  std::string out;
  out += metric_block(rows, "ms per token", "token_ms", 3);
  out += metric_block(rows, "state MiB", "state_mib", 3);
  out += "\ntime per token against the transformer's\n";
  for (const auto& m : models) {
    if (m == "transformer") continue;
    out += fmt::format("{:<22}", m);
    for (const int64_t L : lengths) {
      const auto *r = find_row(rows, m, L), *t = find_row(rows, "transformer", L);
      out += r && t ? fmt::format(" {:>8.2f}x", r->at("token_ms").get<double>() /
                                                    t->at("token_ms").get<double>())
                    : fmt::format(" {:>9}", "-");
    }
    out += "\n";
  }
  // Extractor Table 4, per sublayer: (t d^2 + 2 d^2 + d) / (2 t d + 4 d^2) at t = L.
  if (!rows.empty()) {
    const double d = rows.front().value("D", 0.0);
    out += fmt::format("{:<22}", "extractor T.4 (mults)");
    for (const int64_t L : lengths) {
      const double t = static_cast<double>(L);
      out += fmt::format(" {:>8.1f}x", (t * d * d + 2 * d * d + d) / (2 * t * d + 4 * d * d));
    }
    out += "\n(the last row: one Extractor sublayer's multiplications per generated token "
           "over one\n attention sublayer's, extractor Table 4, at t = L and this D)\n";
  }
  return out;
}

void plot_models_bench(const std::vector<nlohmann::json>& rows, const std::string& path) {
  if (rows.empty()) throw std::invalid_argument("bench models: nothing to plot");
  const auto models = models_of(rows);
  std::ostringstream dat;
  dat << "# per model (one gnuplot index each): L tokens_per_s bytes_per_token\n";
  for (const auto& m : models) {
    dat << "# " << m << "\n";
    for (const int64_t L : lengths_of(rows))
      if (const auto* r = find_row(rows, m, L))
        dat << L << ' ' << r->at("tokens_per_s").get<double>() << ' '
            << r->at("bytes_per_token").get<double>() << '\n';
    dat << "\n\n";
  }
  const auto& first = rows.front();
  std::ostringstream gp;
  gp << train::gnuplot_terminal("models.png", 1100, 900) << "set output 'models.png'\n"
     << "set multiplot layout 2,1 title "
     << fmt::format("'training step, B = {}, d_model = {}, {} layers: seqmix bench models'\n",
                    first.value("B", int64_t{0}), first.value("D", int64_t{0}),
                    first.value("layers", int64_t{0}))
     << "set logscale xy 2\nset grid\nset key outside right\nset xlabel 'sequence length L'\n"
     << "set ylabel 'tokens/s'\nset format y '%g'\nplot \\\n";
  // Model names come from models_bench_names() (letters and '-'), never from the user.
  for (size_t i = 0; i < models.size(); ++i)
    gp << "  'models.dat' index " << i << " using 1:2 with linespoints lw 2 pt 7 title '"
       << models[i] << "'" << (i + 1 < models.size() ? ", \\\n" : "\n");
  // KiB, printed as plain numbers: gnuplot's default tick format writes 1.67772e+07.
  gp << "set ylabel 'peak tensor KiB per token'\nset format y '%g'\nplot \\\n";
  for (size_t i = 0; i < models.size(); ++i)
    gp << "  'models.dat' index " << i << " using 1:($3/1024) with linespoints lw 2 pt 7 title '"
       << models[i] << "'" << (i + 1 < models.size() ? ", \\\n" : "\n");
  gp << "unset multiplot\n";
  train::GnuplotJob job;
  job.script = gp.str();
  job.output = "models.png";
  job.files = {{"models.dat", dat.str()}};
  train::run_gnuplot(job, path);
}

}  // namespace seqmix::bench
