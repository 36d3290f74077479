#include "seqmix/train/reporting/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "seqmix/dist/process_group.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/reporting/plot.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/files.h"
#include "seqmix/util/paths.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {

bool valid_model_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  return true;
}

const char* const kNameRule =
    "may use only letters, digits, '-', '_' and '.' (and is not '.' or '..')";

}  // namespace

CompareModel parse_compare_model(const std::string& spec) {
  std::istringstream in(spec);
  std::string head, word;
  in >> head;
  const auto eq = head.find('=');
  const std::string form = " (expected NAME=PRESET [section.key=value ...])";
  const std::string shown = util::printable_text(spec);
  if (eq == std::string::npos || eq == 0 || eq + 1 == head.size())
    throw std::invalid_argument("model spec '" + shown + "'" + form);
  CompareModel m;
  m.name = head.substr(0, eq);
  if (!valid_model_name(m.name))
    throw std::invalid_argument("model spec '" + shown + "': the name '" +
                                util::printable_text(m.name) + "' " + kNameRule);
  m.overrides.emplace_back("model.preset", head.substr(eq + 1), "model spec '" + shown + "'");
  while (in >> word) {
    const auto e = word.find('='), d = word.find('.');
    if (e == std::string::npos || d == std::string::npos || d > e)
      throw std::invalid_argument("model spec '" + shown + "': '" + util::printable_text(word) +
                                  "'" + form);
    try {
      m.overrides.emplace_back(word);
    } catch (const std::runtime_error& err) {
      throw std::invalid_argument("model spec '" + shown + "': " + err.what());
    }
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

int64_t compare_bucket(int64_t bucket, int64_t max_steps) {
  return bucket > 0 ? bucket : std::max<int64_t>(1, max_steps / 20);
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

// A gnuplot single-quoted string of text seqmix made (model names are checked against
// kNameRule, figures are numbers): '' escapes '.
std::string gnuplot_string(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string short_count(int64_t n) {
  if (n >= 1000000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

bool finite_number(const nlohmann::json& line, const char* key, double& value) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return false;
  value = it->get<double>();
  return std::isfinite(value);
}

// The finished run in `dir`, if there is one: its final held-out line.
bool finished_run(const fs::path& dir, const RunConfig& config, nlohmann::json& final_eval) {
  const fs::path ckpt = dir / "checkpoint.pt", metrics = dir / "metrics.jsonl";
  if (!fs::is_regular_file(ckpt) || !fs::is_regular_file(metrics)) return false;
  const auto lines = read_metrics(metrics.string());
  const std::string held_out = held_out_split(lines);
  for (const auto& line : lines)
    if (!held_out.empty() && evaluation_split(line) == held_out && line.value("final", false) &&
        line.value("step", int64_t{-1}) == config.train.max_steps)
      final_eval = line;
  if (final_eval.is_null()) return false;
  RunConfig stored = read_checkpoint_config(ckpt.string());
  stored.train.threads = config.train.threads;
  stored.data.dir = config.data.dir;
  // The schedule's horizon, however it is written (0 means train.max_steps).
  RunConfig wanted = config;
  for (RunConfig* c : {&wanted, &stored})
    if (c->train.decay_steps <= 0) c->train.decay_steps = c->train.max_steps;
  const auto diff = wanted.diff(stored);
  if (!diff.empty())
    throw std::runtime_error("compare: run folder '" + dir.string() +
                             "' holds a different finished run (" + diff.front() +
                             "); remove it or choose another `out_dir`");
  return true;
}

}  // namespace

std::vector<RunConfig> resolve_compare(const CompareOptions& o) {
  if (o.out_dir.empty()) throw std::runtime_error("compare: no output folder given (`out_dir`)");
  util::check_path_text(o.out_dir, "compare: `out_dir`");
  if (!o.config_path.empty()) util::check_path_text(o.config_path, "compare: `config_path`");
  if (o.models.empty()) throw std::runtime_error("compare: no models given (`models`)");
  if (o.bucket < 0) throw std::runtime_error("compare: `bucket` must be >= 1 (or 0: automatic)");
  if (o.seeds < 1 || o.seeds > CompareOptions::kMaxSeeds)
    throw std::runtime_error(fmt::format("compare: `seeds` must be in [1, {}], got {}",
                                         CompareOptions::kMaxSeeds, o.seeds));
  std::set<std::string> names;
  std::vector<RunConfig> configs;
  for (const auto& m : o.models) {
    if (!valid_model_name(m.name))
      throw std::runtime_error("compare: model name '" + util::printable_text(m.name) + "' " +
                               kNameRule);
    if (!names.insert(m.name).second)
      throw std::runtime_error("compare: model name '" + m.name + "' is given twice");
    std::vector<Override> overrides = o.shared_overrides;
    overrides.insert(overrides.end(), m.overrides.begin(), m.overrides.end());
    overrides.emplace_back("train.log_interval", int64_t{1});  // one training line per batch
    try {
      configs.push_back(resolve_config(o.config_path, overrides));
    } catch (const std::exception& e) {
      throw std::runtime_error("compare: model '" + m.name + "': " + e.what());
    }
    const auto& d = configs.back().data;
    util::check_path_text(d.source, "compare: data.source");
    util::check_path_text(d.dir, "compare: data.dir");
    util::check_path_text(d.tokenizer, "compare: data.tokenizer");
    const auto keys = batch_keys_differing(configs.front(), configs.back());
    if (!keys.empty())
      throw std::runtime_error("compare: model '" + m.name + "' differs from '" +
                               o.models.front().name + "' in " + keys.front() +
                               ", so the two would not train on the same batches");
  }
  return configs;
}

namespace {

// One seed's comparison: every model trained (or reused) in <out_dir>/<name>, the plot drawn.
CompareResult compare_one(const CompareOptions& o, const std::vector<RunConfig>& configs) {
  const int64_t max_steps = configs.front().train.max_steps;
  const int64_t bucket = compare_bucket(o.bucket, max_steps);
  if (o.bucket == 0)
    fmt::print(stderr, "compare: buckets of {} batches (max_steps / 20; --bucket to choose)\n",
               bucket);
  const bool writer = !o.group || o.group->rank() == 0;
  auto make_folder = [&] {
    if (!writer) return;
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec || !fs::is_directory(o.out_dir))
      throw std::runtime_error("compare: cannot create '" + o.out_dir + "': " + ec.message());
  };
  if (o.group)
    o.group->all_or_none("compare: creating the output folder", make_folder);
  else
    make_folder();

  // The held-out figure of the second panel: bpc when every model reports it (language
  // models), else accuracy (classifiers), else the loss.
  CompareResult result;
  // The y axis spans the bucket quartiles: early spikes of single batches (a model without
  // normalisation or clipping can reach hundreds of nats) would flatten everything else.
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
  std::vector<double> all_costs;
  std::ostringstream buckets_dat, batches_dat, summary;
  buckets_dat << "# per model (one gnuplot index each): first_batch last_batch q1 median q3"
                 " of the training cost per batch, nats per token\n";
  batches_dat << "# per model (one gnuplot index each): batch cost\n";
  std::vector<std::vector<nlohmann::json>> held_out(o.models.size());
  for (size_t i = 0; i < o.models.size(); ++i) {
    const auto& m = o.models[i];
    const RunConfig& config = configs[i];
    const fs::path dir = fs::path(o.out_dir) / m.name;
    CompareRow row;
    row.name = m.name;
    row.preset = config.model.preset;
    row.parameters = config.model.num_parameters();
    row.seed = config.train.seed;
    nlohmann::json final_eval;
    // Rank 0's folder decides whether a model is trained, resumed or reused.
    bool reuse = writer && finished_run(dir, config, final_eval);
    bool resume = writer && fs::is_regular_file(dir / "checkpoint.pt");
    if (o.group) {
      std::vector<at::Tensor> flags{at::tensor({reuse ? 1 : 0, resume ? 1 : 0}, at::kInt)};
      o.group->broadcast(flags, 0, "compare: the state of '" + m.name + "'");
      reuse = flags[0][0].item<int>() != 0;
      resume = flags[0][1].item<int>() != 0;
    }
    if (reuse && !writer) continue;
    if (reuse) {
      row.reused = true;
      row.eval_loss = final_eval.value("loss", 0.0);
      row.eval_perplexity = final_eval.value("perplexity", std::exp(row.eval_loss));
      row.eval_bpc = final_eval.value("bpc", 0.0);
      fmt::print(stderr, "compare: '{}' is already trained in '{}'\n", m.name, dir.string());
    } else {
      if (writer)
        fmt::print(stderr, "compare: training '{}' ({} / {}) into '{}'\n", m.name, i + 1,
                 o.models.size(), dir.string());
      TrainingRequest request;
      request.resolved = config;
      request.out_dir = dir.string();
      request.resume = resume;
      // A run stopped before its first checkpoint left only its configuration and metrics:
      // nothing to continue or lose, so it starts again.
      request.overwrite = !resume;
      request.report_interval = o.report_interval;
      request.group = o.group;
      const TrainResult r = run_training(request).result;
      if (!writer) continue;
      row.eval_loss = r.eval_loss;
      row.eval_perplexity = r.eval_perplexity;
      row.eval_bpc = r.eval_bpc;
    }
    // Per-batch costs: with log_interval 1 each training line is one batch.
    std::vector<double> costs;
    std::vector<int64_t> steps;
    const double batch_tokens =
        static_cast<double>(config.train.batch_size * config.model.max_len);
    const auto lines = read_metrics((dir / "metrics.jsonl").string());
    const std::string held_out_name = held_out_split(lines);
    for (const auto& line : lines) {
      const std::string split = evaluation_split(line);
      if (!held_out_name.empty() && split == held_out_name) held_out[i].push_back(line);
      double accuracy;
      if (line.value("final", false) && finite_number(line, "accuracy", accuracy)) {
        if (split == held_out_name) row.eval_accuracy = accuracy;
        if (split == "test") {
          row.test_accuracy = accuracy;
          double majority;
          if (finite_number(line, "majority", majority)) row.test_majority = majority;
          row.test_examples = line.value("examples", int64_t{0});
        }
        if (split == "train_eval") row.train_accuracy = accuracy;
      }
      if (!is_training_line(line)) continue;
      double cost;
      if (!finite_number(line, "loss", cost)) continue;  // a skipped non-finite step
      costs.push_back(cost);
      steps.push_back(line.value("step", static_cast<int64_t>(costs.size())));
      // A language model logs tokens/s, a classifier examples/s.
      const double tokens_rate = line.value("tokens_per_s", 0.0);
      const double examples_rate = line.value("examples_per_s", 0.0);
      if (tokens_rate > 0)
        row.seconds += batch_tokens / tokens_rate;
      else if (examples_rate > 0)
        row.seconds += static_cast<double>(config.train.batch_size) / examples_rate;
    }
    row.steps = static_cast<int64_t>(costs.size());
    if (costs.empty())
      throw std::runtime_error("compare: '" + (dir / "metrics.jsonl").string() +
                               "' holds no training lines");
    buckets_dat << "# " << m.name << "\n";
    batches_dat << "# " << m.name << "\n";
    for (size_t b = 0; b < costs.size(); ++b) batches_dat << steps[b] << ' ' << costs[b] << '\n';
    all_costs.insert(all_costs.end(), costs.begin(), costs.end());
    for (size_t first = 0; first < costs.size(); first += static_cast<size_t>(bucket)) {
      const size_t last = std::min(costs.size(), first + static_cast<size_t>(bucket));
      const auto q = quartiles(std::vector<double>(costs.begin() + static_cast<long>(first),
                                                   costs.begin() + static_cast<long>(last)));
      buckets_dat << first + 1 << ' ' << last << ' ' << q[0] << ' ' << q[1] << ' ' << q[2] << '\n';
      row.train_loss = q[1];
      y_lo = std::min(y_lo, q[0]);
      y_hi = std::max(y_hi, q[2]);
    }
    buckets_dat << "\n\n";
    batches_dat << "\n\n";
    row.classifier = !config.data.task.empty();
    summary << nlohmann::json(row).dump() << '\n';
    result.rows.push_back(row);
  }

  if (!writer) return result;

  // Held-out panel: per model (one gnuplot index each) step and figure of every evaluation of
  // the held-out split; the legend carries the final one.
  std::string eval_metric;
  for (const char* metric : {"bpc", "accuracy", "loss"}) {
    bool everywhere = true;
    for (const auto& lines : held_out) {
      bool has = false;
      double v;
      for (const auto& line : lines) has = has || finite_number(line, metric, v);
      everywhere = everywhere && has;
    }
    if (everywhere) {
      eval_metric = metric;
      break;
    }
  }
  const double eval_scale = eval_metric == "accuracy" ? 100.0 : 1.0;
  std::ostringstream eval_dat;
  eval_dat << "# per model (one gnuplot index each): step held-out " << eval_metric << "\n";
  std::vector<std::string> legends;
  for (size_t i = 0; i < o.models.size(); ++i) {
    std::string legend = fmt::format("{}: {} params", o.models[i].name,
                                     short_count(result.rows[i].parameters));
    if (!eval_metric.empty()) {
      eval_dat << "# " << o.models[i].name << "\n";
      // The final evaluation's figure, else the last one's.
      double final_value = std::numeric_limits<double>::quiet_NaN(), last_value = final_value, v;
      for (const auto& line : held_out[i])
        if (finite_number(line, eval_metric.c_str(), v)) {
          eval_dat << line.value("step", int64_t{0}) << ' ' << v * eval_scale << '\n';
          last_value = v * eval_scale;
          if (line.value("final", false)) final_value = last_value;
        }
      eval_dat << "\n\n";
      legend += fmt::format(", held-out {} {:.4g}{}", eval_metric,
                            std::isnan(final_value) ? last_value : final_value,
                            eval_metric == "accuracy" ? "%" : "");
    }
    legends.push_back(legend);
  }

  const fs::path out = fs::absolute(o.out_dir);
  util::write_file_atomic((out / "compare.dat").string(), buckets_dat.str());
  util::write_file_atomic((out / "compare_batches.dat").string(), batches_dat.str());
  if (!eval_metric.empty())
    util::write_file_atomic((out / "compare_eval.dat").string(), eval_dat.str());
  util::write_file_atomic((out / "summary.jsonl").string(), summary.str());

  const double pad = 0.05 * std::max(y_hi - y_lo, 1e-6);
  const double shown_lo = y_lo - pad, shown_hi = y_hi + pad;
  const auto clipped = std::count_if(all_costs.begin(), all_costs.end(), [&](double c) {
    return c < shown_lo || c > shown_hi;
  });
  if (clipped > 0)
    fmt::print(stderr,
               "compare: the plot's y axis spans the bucket quartiles [{:.3f}, {:.3f}] nats; {} "
               "of {} single-batch costs lie outside it and are clipped (compare_batches.dat "
               "has them all)\n",
               shown_lo, shown_hi, clipped, all_costs.size());

  // The script names only the data files above and its output, relative to the folder it
  // runs in (a private copy, see run_gnuplot; `gnuplot compare.gp` in the output folder
  // draws the same picture). No path and no user text is in it: model names are checked
  // against kNameRule, the rest is numbers and fixed words.
  // Top panel, per model: every batch's cost faintly, the quartile band and the median of each
  // bucket. Bottom panel: the held-out figure at every evaluation.
  const std::vector<std::string> colors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  const bool two_panels = !eval_metric.empty();
  const RunConfig& c0 = configs.front();
  std::ostringstream gp;
  gp << "# seqmix compare: training cost per batch, median and quartiles per " << bucket
     << " batches" << (two_panels ? "; held-out " + eval_metric + " at every evaluation" : "")
     << "\n# run it in the compare folder: gnuplot compare.gp\n"
     << gnuplot_terminal("compare.png", 1280, two_panels ? 1040 : 760)
     << "set output 'compare.png'\n"
     << (two_panels ? "set multiplot\nset origin 0,0.34\nset size 1,0.66\n" : "")
     << "set title "
     << gnuplot_string(fmt::format(
            "training cost per batch (nats per token): median and quartiles of every {} "
            "batches; batch {} x {}",
            bucket, c0.train.batch_size, c0.model.max_len))
     << "\nset xlabel 'batch'\nset ylabel 'cost (nats per token)'\nset grid\n"
     << "set xrange [0:" << max_steps + std::max<int64_t>(1, max_steps / 50) << "]\n"
     << "set yrange [" << shown_lo << ":" << shown_hi
     << "]  # the quartile range; single-batch spikes beyond it are clipped\n"
     << "set key top right\nset style fill transparent solid 0.2 noborder\n"
     << "plot \\\n";
  for (size_t i = 0; i < o.models.size(); ++i) {
    const std::string c = colors[i % colors.size()];
    // "#AARRGGBB": the per-batch costs drawn mostly transparent under the bucket summary.
    gp << "  'compare_batches.dat' index " << i << " using 1:2 with lines lc rgb '#B0"
       << c.substr(1) << "' lw 1 notitle, \\\n"
       << "  'compare.dat' index " << i
       << " using (($1+$2)/2):3:5 with filledcurves lc rgb '" << c << "' notitle, \\\n"
       << "  'compare.dat' index " << i << " using (($1+$2)/2):4 with linespoints lc rgb '" << c
       << "' lw 2 pt 7 ps 0.6 title " << gnuplot_string(legends[i])
       << (i + 1 < o.models.size() ? ", \\\n" : "\n");
  }
  if (two_panels) {
    gp << "set origin 0,0\nset size 1,0.34\nset autoscale y\n"
       << "set title 'held-out " << eval_metric
       << " at every evaluation (the last one: the whole split)'\n"
       << "set xlabel 'batch'\nset ylabel 'held-out " << eval_metric
       << (eval_metric == "accuracy" ? " (%)" : eval_metric == "bpc" ? " (bits per byte)" : "")
       << "'\nset key top right\nplot \\\n";
    for (size_t i = 0; i < o.models.size(); ++i)
      gp << "  'compare_eval.dat' index " << i << " using 1:2 with linespoints lc rgb '"
         << colors[i % colors.size()] << "' lw 2 pt 7 ps 1.2 title "
         << gnuplot_string(o.models[i].name) << (i + 1 < o.models.size() ? ", \\\n" : "\n");
    gp << "unset multiplot\n";
  }
  util::write_file_atomic((out / "compare.gp").string(), gp.str());

  GnuplotJob job;
  job.script = gp.str();
  job.output = "compare.png";
  job.files = {{"compare.dat", buckets_dat.str()}, {"compare_batches.dat", batches_dat.str()}};
  if (two_panels) job.files.emplace_back("compare_eval.dat", eval_dat.str());
  try {
    run_gnuplot(job, (out / "compare.png").string());
  } catch (const std::exception& e) {
    throw std::runtime_error("compare: " + std::string(e.what()) +
                             "; the runs and summary.jsonl are written, the plot script is '" +
                             (out / "compare.gp").string() + "'");
  }
  result.plot = (out / "compare.png").string();
  return result;
}

// The figure the seeds are compared on, and whether higher is better.
std::pair<std::string, bool> seed_metric(const CompareRow& row) {
  if (row.classifier) return {"test_accuracy", true};
  if (row.eval_bpc > 0) return {"bpc", false};
  return {"loss", false};
}

double seed_figure(const CompareRow& row, const std::string& metric) {
  if (metric == "test_accuracy") return row.test_accuracy;
  if (metric == "bpc") return row.eval_bpc;
  return row.eval_loss;
}

// seeds.png: each model's figure per seed (points) and mean +- sd (error bar).
void plot_seeds(const fs::path& out, const std::vector<SeedSummary>& summaries) {
  const bool accuracy = summaries.front().metric == "test_accuracy";
  const double scale = accuracy ? 100.0 : 1.0;
  std::ostringstream dat;
  dat << "# model_index mean sd (" << summaries.front().metric
      << (accuracy ? ", percent" : "") << "), then one line per seed: model_index value\n";
  for (size_t i = 0; i < summaries.size(); ++i)
    dat << i << ' ' << summaries[i].mean * scale << ' ' << summaries[i].sd * scale << '\n';
  dat << "\n\n";
  for (size_t i = 0; i < summaries.size(); ++i)
    for (const double v : summaries[i].values) dat << i << ' ' << v * scale << '\n';
  std::ostringstream gp;
  gp << "# seqmix compare: held-out figure per model over seeds; run in the folder: "
        "gnuplot seeds.gp\n"
     << gnuplot_terminal("seeds.png", 960, 600) << "set output 'seeds.png'\n"
     << "set title "
     << gnuplot_string(fmt::format("{} over {} seeds: each seed (dots), mean +- sd (bars)",
                                   summaries.front().metric, summaries.front().values.size()))
     << "\nset ylabel "
     << gnuplot_string(accuracy ? "test accuracy (%)"
                                : summaries.front().metric == "bpc" ? "held-out bpc"
                                                                     : "held-out loss (nats)")
     << "\nset grid ytics\nset xrange [-0.5:" << static_cast<double>(summaries.size()) - 0.5
     << "]\nset xtics (";
  for (size_t i = 0; i < summaries.size(); ++i)
    gp << (i ? ", " : "") << gnuplot_string(summaries[i].name) << ' ' << i;
  gp << ")\nset key off\n"
     << "plot 'seeds.dat' index 0 using 1:2:3 with yerrorbars lc rgb '#1f77b4' lw 2 pt 7 "
        "ps 1.5, \\\n"
     << "  'seeds.dat' index 1 using 1:2 with points lc rgb '#d62728' pt 6 ps 1.2\n";
  util::write_file_atomic((out / "seeds.dat").string(), dat.str());
  util::write_file_atomic((out / "seeds.gp").string(), gp.str());
  GnuplotJob job;
  job.script = gp.str();
  job.output = "seeds.png";
  job.files = {{"seeds.dat", dat.str()}};
  try {
    run_gnuplot(job, (out / "seeds.png").string());
  } catch (const std::exception& e) {
    throw std::runtime_error("compare: " + std::string(e.what()) +
                             "; the runs, summary.jsonl and pairs.jsonl are written, the plot "
                             "script is '" + (out / "seeds.gp").string() + "'");
  }
}

}  // namespace

std::pair<double, double> mean_sd(const std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("mean_sd: no values");
  const auto n = static_cast<double>(values.size());
  double mean = 0;
  for (const double v : values) mean += v / n;
  if (values.size() == 1) return {mean, 0.0};
  double ss = 0;
  for (const double v : values) ss += (v - mean) * (v - mean);
  return {mean, std::sqrt(ss / (n - 1))};
}

double chance_bound(double p, int64_t n) {
  if (!(p >= 0 && p <= 1) || n < 1)
    throw std::invalid_argument(
        fmt::format("chance_bound: expected 0 <= p <= 1 and n >= 1, got p {} and n {}", p, n));
  return p + 5 * std::sqrt(p * (1 - p) / static_cast<double>(n));
}

SeedPair seed_verdict(const SeedSummary& a, const SeedSummary& b) {
  SeedPair p;
  p.a = a.name;
  p.b = b.name;
  p.gap = a.mean - b.mean;
  if (a.at_chance || b.at_chance) {
    p.verdict = "not comparable";
    if (a.values.size() >= 2 && b.values.size() >= 2)
      p.se = std::sqrt(a.sd * a.sd / static_cast<double>(a.values.size()) +
                       b.sd * b.sd / static_cast<double>(b.values.size()));
    return p;
  }
  if (a.values.size() < 2 || b.values.size() < 2) {
    p.verdict = "undecided";
    return p;
  }
  p.se = std::sqrt(a.sd * a.sd / static_cast<double>(a.values.size()) +
                   b.sd * b.sd / static_cast<double>(b.values.size()));
  // A gap of exactly zero with zero spread is a tie too (|0| < 3 * 0 is false).
  if (std::abs(p.gap) < 3 * p.se || p.gap == 0) {
    p.verdict = "tie";
  } else {
    const bool a_higher = p.gap > 0;
    p.verdict = a_higher == a.higher_is_better ? "a" : "b";
  }
  return p;
}

void to_json(nlohmann::json& j, const CompareRow& row) {
  j = nlohmann::json{{"name", row.name},           {"preset", row.preset},
                     {"parameters", row.parameters}, {"seed", row.seed},
                     {"steps", row.steps},         {"train_loss", row.train_loss},
                     {"loss", row.eval_loss},      {"seconds", row.seconds},
                     {"reused", row.reused}};
  // Perplexity and bits per character mean nothing for a classifier.
  if (!row.classifier) {
    j["perplexity"] = row.eval_perplexity;
    j["bpc"] = row.eval_bpc;
  } else {
    j["accuracy"] = row.eval_accuracy;
    j["test_accuracy"] = row.test_accuracy;
    j["train_accuracy"] = row.train_accuracy;
    if (row.test_majority > 0) j["test_majority"] = row.test_majority;
    if (row.test_examples > 0) j["test_examples"] = row.test_examples;
  }
}

void to_json(nlohmann::json& j, const SeedSummary& s) {
  j = nlohmann::json{{"name", s.name},     {"preset", s.preset}, {"parameters", s.parameters},
                     {"metric", s.metric}, {"seeds", s.seeds},   {"values", s.values},
                     {"mean", s.mean},     {"sd", s.sd}};
  if (s.chance_bound > 0) {
    j["chance"] = s.chance;
    j["chance_bound"] = s.chance_bound;
    j["test_examples"] = s.test_examples;
    j["at_chance"] = s.at_chance;
    j["seeds_at_chance"] = s.seeds_at_chance;
  }
}

void to_json(nlohmann::json& j, const SeedPair& p) {
  j = nlohmann::json{{"a", p.a}, {"b", p.b}, {"gap", p.gap}, {"se", p.se},
                     {"verdict", p.verdict}};
}

CompareResult compare(const CompareOptions& o) {
  const std::vector<RunConfig> configs = resolve_compare(o);
  if (o.seeds == 1) return compare_one(o, configs);
  // Every seed's configurations are resolved (so checked) before any model trains.
  const int64_t first_seed = configs.front().train.seed;
  std::vector<CompareOptions> per_seed;
  std::vector<std::vector<RunConfig>> per_seed_configs;
  for (int64_t k = 0; k < o.seeds; ++k) {
    CompareOptions so = o;
    so.seeds = 1;
    so.out_dir = (fs::path(o.out_dir) / ("seed-" + std::to_string(first_seed + k))).string();
    so.shared_overrides.emplace_back("train.seed", first_seed + k);
    per_seed_configs.push_back(resolve_compare(so));
    per_seed.push_back(std::move(so));
  }
  CompareResult result;
  for (size_t k = 0; k < per_seed.size(); ++k) {
    if (!o.group || o.group->rank() == 0)
      fmt::print(stderr, "compare: seed {} ({} / {}) into '{}'\n", first_seed + int64_t(k),
                 k + 1, per_seed.size(), per_seed[k].out_dir);
    const CompareResult r = compare_one(per_seed[k], per_seed_configs[k]);
    result.rows.insert(result.rows.end(), r.rows.begin(), r.rows.end());
  }
  if (o.group && o.group->rank() != 0) return result;

  const size_t n_models = o.models.size();
  for (size_t i = 0; i < n_models; ++i) {
    SeedSummary s;
    const CompareRow& first = result.rows[i];
    s.name = first.name;
    s.preset = first.preset;
    s.parameters = first.parameters;
    std::tie(s.metric, s.higher_is_better) = seed_metric(first);
    for (size_t k = 0; k < per_seed.size(); ++k) {
      const CompareRow& row = result.rows[k * n_models + i];
      s.seeds.push_back(row.seed);
      s.values.push_back(seed_figure(row, s.metric));
    }
    std::tie(s.mean, s.sd) = mean_sd(s.values);
    // Every seed scores the same test split; its majority class is the chance level.
    if (first.classifier && first.test_majority > 0 && first.test_examples > 0) {
      s.chance = first.test_majority;
      s.test_examples = first.test_examples;
      s.chance_bound = chance_bound(s.chance, first.test_examples);
      s.at_chance = s.mean <= s.chance_bound;
      s.seeds_at_chance = std::count_if(s.values.begin(), s.values.end(),
                                        [&](double v) { return v <= s.chance_bound; });
    }
    result.summaries.push_back(std::move(s));
  }
  for (size_t i = 0; i < n_models; ++i)
    for (size_t j = i + 1; j < n_models; ++j)
      result.pairs.push_back(seed_verdict(result.summaries[i], result.summaries[j]));

  const fs::path out = fs::absolute(o.out_dir);
  std::string summary, pairs;
  for (const auto& s : result.summaries) summary += nlohmann::json(s).dump() + "\n";
  for (const auto& p : result.pairs) pairs += nlohmann::json(p).dump() + "\n";
  util::write_file_atomic((out / "summary.jsonl").string(), summary);
  util::write_file_atomic((out / "pairs.jsonl").string(), pairs);
  plot_seeds(out, result.summaries);
  result.plot = (out / "seeds.png").string();
  return result;
}

}  // namespace seqmix::train
