#include "seqmix/train/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "seqmix/train/checkpoint.h"
#include "seqmix/train/metrics.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/files.h"

namespace seqmix::train {

namespace fs = std::filesystem;

CompareModel parse_compare_model(const std::string& spec) {
  std::istringstream in(spec);
  std::string head, word;
  in >> head;
  const auto eq = head.find('=');
  const std::string form = " (expected NAME=PRESET [section.key=value ...])";
  if (eq == std::string::npos || eq == 0 || eq + 1 == head.size())
    throw std::invalid_argument("model spec '" + spec + "'" + form);
  CompareModel m;
  m.name = head.substr(0, eq);
  for (const char c : m.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      throw std::invalid_argument("model spec '" + spec + "': the name '" + m.name +
                                  "' may use only letters, digits, '-', '_' and '.'");
  m.overrides.push_back("model.preset=" + head.substr(eq + 1));
  while (in >> word) {
    const auto e = word.find('='), d = word.find('.');
    if (e == std::string::npos || d == std::string::npos || d > e)
      throw std::invalid_argument("model spec '" + spec + "': '" + word + "'" + form);
    m.overrides.push_back(word);
  }
  return m;
}

std::vector<double> quartiles(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("quartiles: no values");
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  return {at(0.25), at(0.5), at(0.75)};
}

namespace {

// The keys that decide which batches a run draws, in the order they are checked.
std::vector<std::string> batch_keys_differing(const RunConfig& a, const RunConfig& b) {
  std::vector<std::string> keys;
  if (a.data.source != b.data.source) keys.push_back("data.source");
  if (a.data.eval_split != b.data.eval_split) keys.push_back("data.eval_split");
  if (a.data.tokenizer != b.data.tokenizer) keys.push_back("data.tokenizer");
  if (a.model.max_len != b.model.max_len) keys.push_back("model.max_len");
  if (a.train.batch_size != b.train.batch_size) keys.push_back("train.batch_size");
  if (a.train.seed != b.train.seed) keys.push_back("train.seed");
  if (a.train.max_steps != b.train.max_steps) keys.push_back("train.max_steps");
  return keys;
}

std::string quoted(const std::string& s) {  // for gnuplot and the shell: '...' with ' escaped
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string gnuplot_string(const std::string& s) {  // gnuplot single quotes: '' escapes '
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// The finished run in `dir`, if there is one: its final held-out line.
bool finished_run(const fs::path& dir, const RunConfig& config, nlohmann::json& final_eval) {
  const fs::path ckpt = dir / "checkpoint.pt", metrics = dir / "metrics.jsonl";
  if (!fs::is_regular_file(ckpt) || !fs::is_regular_file(metrics)) return false;
  for (const auto& line : read_metrics(metrics.string()))
    if (line.value("split", "") == "eval" && line.value("final", false) &&
        line.value("step", int64_t{-1}) == config.train.max_steps)
      final_eval = line;
  if (final_eval.is_null()) return false;
  RunConfig stored = read_checkpoint_config(ckpt.string());
  stored.train.threads = config.train.threads;
  stored.data.dir = config.data.dir;
  const auto diff = config.diff(stored);
  if (!diff.empty())
    throw std::runtime_error("compare: run folder '" + dir.string() +
                             "' holds a different finished run (" + diff.front() +
                             "); remove it or choose another --out");
  return true;
}

}  // namespace

CompareResult compare(const CompareOptions& o) {
  if (o.out_dir.empty()) throw std::runtime_error("compare: no output folder given (--out)");
  if (o.models.empty()) throw std::runtime_error("compare: no models given (--model NAME=PRESET)");
  if (o.bucket < 1) throw std::runtime_error("compare: --bucket must be >= 1");
  std::set<std::string> names;
  std::vector<RunConfig> configs;
  for (const auto& m : o.models) {
    if (!names.insert(m.name).second)
      throw std::runtime_error("compare: model name '" + m.name + "' is given twice");
    std::vector<std::string> overrides = o.shared_overrides;
    overrides.insert(overrides.end(), m.overrides.begin(), m.overrides.end());
    overrides.push_back("train.log_interval=1");  // one training line per batch
    try {
      configs.push_back(resolve_config(o.config_path, overrides));
    } catch (const std::exception& e) {
      throw std::runtime_error("compare: model '" + m.name + "': " + e.what());
    }
    const auto keys = batch_keys_differing(configs.front(), configs.back());
    if (!keys.empty())
      throw std::runtime_error("compare: model '" + m.name + "' differs from '" +
                               o.models.front().name + "' in " + keys.front() +
                               ", so the two would not train on the same batches");
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir))
    throw std::runtime_error("compare: cannot create '" + o.out_dir + "': " + ec.message());

  CompareResult result;
  // The y axis spans the bucket quartiles: early spikes of single batches (a model without
  // normalisation or clipping can reach hundreds of nats) would flatten everything else.
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
  std::ostringstream buckets_dat, batches_dat, summary;
  buckets_dat << "# per model (one gnuplot index each): first_batch last_batch q1 median q3"
                 " of the training cost per batch, nats per token\n";
  batches_dat << "# per model (one gnuplot index each): batch cost\n";
  for (size_t i = 0; i < o.models.size(); ++i) {
    const auto& m = o.models[i];
    const RunConfig& config = configs[i];
    const fs::path dir = fs::path(o.out_dir) / m.name;
    CompareRow row;
    row.name = m.name;
    row.preset = config.model.preset;
    row.parameters = config.model.num_parameters();
    nlohmann::json final_eval;
    if (finished_run(dir, config, final_eval)) {
      row.reused = true;
      row.eval_loss = final_eval.value("loss", 0.0);
      row.eval_perplexity = final_eval.value("perplexity", std::exp(row.eval_loss));
      row.eval_bpc = final_eval.value("bpc", 0.0);
      fmt::print(stderr, "compare: '{}' is already trained in '{}'\n", m.name, dir.string());
    } else {
      fmt::print(stderr, "compare: training '{}' ({} / {}) into '{}'\n", m.name, i + 1,
                 o.models.size(), dir.string());
      TrainOptions opts;
      opts.out_dir = dir.string();
      opts.resume = fs::is_regular_file(dir / "checkpoint.pt");
      opts.report_interval = o.report_interval;
      const TrainResult r = train(config, opts);
      row.eval_loss = r.eval_loss;
      row.eval_perplexity = r.eval_perplexity;
      row.eval_bpc = r.eval_bpc;
    }
    // Per-batch costs: with log_interval 1 each training line is one batch.
    std::vector<double> costs;
    const double batch_tokens =
        static_cast<double>(config.train.batch_size * config.model.max_len);
    for (const auto& line : read_metrics((dir / "metrics.jsonl").string())) {
      if (line.value("split", "") != "train") continue;
      costs.push_back(line.at("loss").get<double>());
      const double rate = line.value("tokens_per_s", 0.0);
      if (rate > 0) row.seconds += batch_tokens / rate;
    }
    row.steps = static_cast<int64_t>(costs.size());
    if (costs.empty())
      throw std::runtime_error("compare: '" + (dir / "metrics.jsonl").string() +
                               "' holds no training lines");
    buckets_dat << "# " << m.name << "\n";
    batches_dat << "# " << m.name << "\n";
    for (size_t b = 0; b < costs.size(); ++b) batches_dat << b + 1 << ' ' << costs[b] << '\n';
    for (size_t first = 0; first < costs.size(); first += static_cast<size_t>(o.bucket)) {
      const size_t last = std::min(costs.size(), first + static_cast<size_t>(o.bucket));
      const auto q = quartiles(std::vector<double>(costs.begin() + static_cast<long>(first),
                                                   costs.begin() + static_cast<long>(last)));
      buckets_dat << first + 1 << ' ' << last << ' ' << q[0] << ' ' << q[1] << ' ' << q[2] << '\n';
      row.train_loss = q[1];
      y_lo = std::min(y_lo, q[0]);
      y_hi = std::max(y_hi, q[2]);
    }
    buckets_dat << "\n\n";
    batches_dat << "\n\n";
    summary << nlohmann::json{{"name", row.name},
                              {"preset", row.preset},
                              {"parameters", row.parameters},
                              {"steps", row.steps},
                              {"train_loss", row.train_loss},
                              {"loss", row.eval_loss},
                              {"perplexity", row.eval_perplexity},
                              {"bpc", row.eval_bpc},
                              {"seconds", row.seconds},
                              {"reused", row.reused}}
                   .dump()
            << '\n';
    result.rows.push_back(row);
  }

  const fs::path out = fs::absolute(o.out_dir);
  util::write_file_atomic((out / "compare.dat").string(), buckets_dat.str());
  util::write_file_atomic((out / "compare_batches.dat").string(), batches_dat.str());
  util::write_file_atomic((out / "summary.jsonl").string(), summary.str());

  // Per model: every batch's cost faintly, the quartile band and the median of each bucket.
  const std::vector<std::string> colors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream gp;
  gp << "# seqmix compare: training cost per batch, median and quartiles per " << o.bucket
     << " batches\n"
     << "set terminal pngcairo noenhanced size 1280,760 font 'sans,11'\n"
     << "set output " << gnuplot_string((out / "compare.png.tmp").string()) << "\n"
     << "set title " << gnuplot_string(fmt::format(
                            "training cost per batch (nats per token): median and quartiles of "
                            "every {} batches; {}, batch {} x {}",
                            o.bucket, configs[0].data.source, configs[0].train.batch_size,
                            configs[0].model.max_len))
     << "\nset xlabel 'batch'\nset ylabel 'cost (nats per token)'\nset grid\n"
     << "set yrange [" << y_lo - 0.05 * (y_hi - y_lo) << ":" << y_hi + 0.05 * (y_hi - y_lo)
     << "]  # the quartile range; single-batch spikes beyond it are clipped\n"
     << "set key top right\nset style fill transparent solid 0.2 noborder\n"
     << "buckets = " << gnuplot_string((out / "compare.dat").string()) << "\n"
     << "batches = " << gnuplot_string((out / "compare_batches.dat").string()) << "\n"
     << "plot \\\n";
  for (size_t i = 0; i < o.models.size(); ++i) {
    const std::string c = colors[i % colors.size()];
    // "#AARRGGBB": the per-batch costs drawn mostly transparent under the bucket summary.
    gp << "  batches index " << i << " using 1:2 with lines lc rgb '#B0" << c.substr(1)
       << "' lw 1 notitle, \\\n"
       << "  buckets index " << i << " using (($1+$2)/2):3:5 with filledcurves lc rgb '" << c
       << "' notitle, \\\n"
       << "  buckets index " << i << " using (($1+$2)/2):4 with linespoints lc rgb '" << c
       << "' lw 2 pt 7 ps 0.6 title " << gnuplot_string(o.models[i].name)
       << (i + 1 < o.models.size() ? ", \\\n" : "\n");
  }
  util::write_file_atomic((out / "compare.gp").string(), gp.str());
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fmt::print(stderr, "compare: gnuplot not found; the plot script is '{}'\n",
               (out / "compare.gp").string());
  } else if (std::system(("gnuplot " + quoted((out / "compare.gp").string())).c_str()) != 0) {
    fs::remove(out / "compare.png.tmp", ec);
    fmt::print(stderr, "compare: gnuplot failed on '{}'\n", (out / "compare.gp").string());
  } else {
    fs::rename(out / "compare.png.tmp", out / "compare.png");
    result.plot = (out / "compare.png").string();
  }
  return result;
}

}  // namespace seqmix::train
