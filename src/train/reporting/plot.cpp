#include "seqmix/train/reporting/plot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "seqmix/train/configuration/config.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/util/files.h"
#include "seqmix/util/paths.h"
#include "seqmix/util/run_folder.h"

extern char** environ;

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {

bool plain_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// A folder made by mkdtemp (mode 0700, a fresh name), removed with its contents on scope exit.
class PrivateDir {
 public:
  explicit PrivateDir(const fs::path& parent) {
    std::string pattern = (parent / ".seqmix-plot-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("cannot create a temporary folder in '" +
                               util::printable_text(parent.string()) +
                               "': " + std::strerror(errno));
    path_ = pattern;
  }
  ~PrivateDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// gnuplot's message from its stderr: the first error line ("<script>" line N: ...), else the
// first warning line, else the first non-empty line.
std::string gnuplot_message(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r^") != std::string::npos) lines.push_back(line);
  for (const auto& l : lines)
    if (l.find("\" line ") != std::string::npos && l.find("warning:") == std::string::npos)
      return l;
  for (const auto& l : lines)
    if (l.find("warning:") != std::string::npos) return l;
  return lines.empty() ? std::string() : lines.front();
}

}  // namespace

bool is_training_line(const nlohmann::json& line) {
  return line.is_object() && line.value("split", "") == "train" && !line.contains("final");
}

std::string evaluation_split(const nlohmann::json& line) {
  if (!line.is_object() || !line.contains("split") || !line["split"].is_string()) return "";
  if (is_training_line(line)) return "";
  const std::string split = line["split"].get<std::string>();
  return split == "train" ? "train_eval" : split;
}

std::string held_out_split(const std::vector<nlohmann::json>& lines) {
  for (const auto& line : lines) {
    const std::string split = evaluation_split(line);
    if (!split.empty() && split != "train_eval") return split;
  }
  return "";
}

std::string column_header(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    out += ch == '"' ? '\'' : (c < 0x20 || c == 0x7f) ? '?' : ch;
  }
  return out + "\"";
}

std::string gnuplot_terminal(const std::string& output_name, int width, int height) {
  const std::string ext = fs::path(output_name).extension().string();
  std::string lower(ext.size(), ' ');
  std::transform(ext.begin(), ext.end(), lower.begin(),
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  if (lower == ".png")
    return fmt::format("set terminal pngcairo noenhanced size {},{} font 'sans,11'\n", width,
                       height);
  if (lower == ".svg")
    return fmt::format("set terminal svg noenhanced size {},{} font 'sans,11' background '#ffffff'\n",
                       width, height);
  throw std::invalid_argument("picture '" + util::printable_text(output_name) +
                              "': expected a name ending in .png or .svg");
}

void run_gnuplot(const GnuplotJob& job, const std::string& destination) {
  for (const auto& f : job.files)
    if (!plain_name(f.first) || f.first == "plot.gp" || f.first == "gnuplot.err")
      throw std::invalid_argument("run_gnuplot: data file name '" +
                                  util::printable_text(f.first) +
                                  "' (expected a plain name of letters, digits, '.', '_', '-')");
  if (!plain_name(job.output))
    throw std::invalid_argument("run_gnuplot: output name '" + util::printable_text(job.output) +
                                "' (expected a plain name of letters, digits, '.', '_', '-')");
  const fs::path dest = fs::absolute(destination);
  PrivateDir dir(dest.parent_path());
  for (const auto& f : job.files) util::write_file_atomic((dir.path() / f.first).string(), f.second);
  util::write_file_atomic((dir.path() / "plot.gp").string(), job.script);

  // gnuplot runs in the private folder, reads the script by its fixed name, stdin from
  // /dev/null, stdout and stderr into gnuplot.err; no shell is involved.
  const std::string err_path = (dir.path() / "gnuplot.err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.path().c_str());
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  char arg0[] = "gnuplot", arg1[] = "plot.gp";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT)
    throw std::runtime_error(
        "gnuplot not found on PATH (scripts/setup.sh installs it: apt-get install gnuplot-nox)");
  if (rc != 0) throw std::runtime_error(std::string("cannot run gnuplot: ") + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(std::string("waiting for gnuplot: ") + std::strerror(errno));

  const fs::path picture = dir.path() / job.output;
  std::error_code ec;
  const bool made = fs::is_regular_file(picture, ec) && fs::file_size(picture, ec) > 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !made) {
    std::string err;
    try {
      err = util::read_file(err_path);
    } catch (const std::exception&) {
    }
    const std::string message = util::printable_text(gnuplot_message(err));
    const std::string how = !WIFEXITED(status)
                                ? fmt::format("killed by signal {}", WTERMSIG(status))
                                : WEXITSTATUS(status) != 0
                                      ? fmt::format("exit status {}", WEXITSTATUS(status))
                                      : "no picture written";
    throw std::runtime_error("gnuplot failed (" + how + ")" +
                             (message.empty() ? std::string() : ": " + message));
  }
  util::check_replaceable(dest.string());  // made a link or FIFO while gnuplot ran
  fs::rename(picture, dest, ec);
  if (ec)
    throw std::runtime_error("cannot move the picture to '" +
                             util::printable_text(dest.string()) + "': " + ec.message());
}

namespace {

const std::vector<std::string> kMetrics = {"bpc", "loss", "accuracy", "lr"};

std::string short_count(int64_t n) {
  if (n >= 1000000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

struct Curve {
  std::string split;  // "train" for the training lines, else the evaluation split
  std::vector<std::pair<int64_t, double>> points;
  bool has_final = false;
  double final_value = 0;
};

struct Run {
  std::string path, name;
  int64_t parameters = -1;
  std::set<std::string> metrics;  // of kMetrics, present in some line
  bool train_bpc = false;
  std::vector<nlohmann::json> lines;
};

bool number_at(const nlohmann::json& line, const std::string& key, double& value) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return false;
  value = it->get<double>();
  return std::isfinite(value);
}

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

PlotResult plot_runs(const PlotOptions& o) {
  if (o.runs.empty()) throw std::invalid_argument("plot: no run folders given");
  if (!o.metric.empty() && std::find(kMetrics.begin(), kMetrics.end(), o.metric) == kMetrics.end())
    throw std::invalid_argument("plot: `metric` '" + util::printable_text(o.metric) +
                                "' (expected bpc, loss, accuracy or lr)");
  for (const auto& r : o.runs) util::check_path_text(r, "plot: run folder");
  if (!o.out.empty()) util::check_path_text(o.out, "plot: `out`");
  if (o.out.empty() && o.runs.size() > 1)
    throw std::invalid_argument(fmt::format(
        "plot: `out` FILE.png or FILE.svg is required with several runs ({} given)",
        o.runs.size()));

  std::vector<Run> runs;
  std::map<std::string, int> name_count;
  for (const auto& path : o.runs) {
    Run run;
    run.path = path;
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw std::runtime_error("plot: run folder '" + path + "' does not exist");
    if (!fs::is_directory(path, ec))
      throw std::runtime_error("plot: '" + path + "' is not a run folder (not a folder)");
    const fs::path metrics = fs::path(path) / "metrics.jsonl";
    if (!fs::is_regular_file(metrics, ec))
      throw std::runtime_error("plot: run folder '" + path +
                               "' has no metrics.jsonl (not a training run folder?)");
    run.lines = read_metrics(metrics.string());
    for (const auto& line : run.lines) {
      if (!line.is_object()) continue;
      for (const auto& m : kMetrics) {
        double v;
        if (number_at(line, m, v)) run.metrics.insert(m);
      }
      double v;
      if (is_training_line(line) && number_at(line, "bpc", v)) run.train_bpc = true;
    }
    const fs::path config = fs::path(path) / "config.toml";
    if (fs::is_regular_file(config, ec)) {
      try {
        run.parameters =
            RunConfig::from_toml(util::read_file(config.string()), config.string())
                .model.num_parameters();
      } catch (const std::exception& e) {
        fmt::print(stderr, "plot: parameter count of '{}' left out: {}\n", path, e.what());
      }
    }
    fs::path p = fs::path(path).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    run.name = p.filename().string();
    if (run.name.empty() || run.name == "." || run.name == "..")
      run.name = fs::absolute(p).lexically_normal().filename().string();
    ++name_count[run.name];
    runs.push_back(std::move(run));
  }
  for (auto& run : runs)
    if (name_count[run.name] > 1) run.name = run.path;  // two folders of the same name

  PlotResult result;
  result.metric = o.metric;
  if (result.metric.empty()) {
    result.metric = "loss";
    for (const auto& run : runs)
      if (run.train_bpc) result.metric = "bpc";
  }
  const std::string& metric = result.metric;
  bool any = false;
  for (const auto& run : runs) any = any || run.metrics.count(metric) > 0;
  if (!any) {
    std::string have;
    for (const auto& run : runs)
      have += fmt::format("{}'{}' has {}", have.empty() ? "" : "; ", run.path, join(run.metrics));
    throw std::runtime_error("plot: no run has '" + metric + "' (" + have + ")");
  }

  result.path = o.out.empty()
                    ? (fs::path(o.runs.front()) / ("plot_" + metric + ".png")).string()
                    : o.out;
  const std::string ext = fs::path(result.path).extension().string();
  std::string lower(ext);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  if (lower != ".png" && lower != ".svg")
    throw std::invalid_argument("plot: `out` '" + result.path +
                                "' must end in .png or .svg");
  {
    std::error_code ec;
    const fs::path parent = fs::absolute(result.path).parent_path();
    if (!fs::is_directory(parent, ec))
      throw std::runtime_error("plot: the folder of `out` '" + result.path + "' does not exist");
    if (fs::is_directory(result.path, ec))
      throw std::runtime_error("plot: `out` '" + result.path + "' is a folder");
    util::check_replaceable(result.path);  // a picture replaces a picture, nothing else
  }
  const std::string output = "plot" + lower;
  const double scale = metric == "accuracy" ? 100.0 : 1.0;

  GnuplotJob job;
  const std::vector<std::string> colors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::vector<std::string> plots;
  int64_t max_step = 1;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    if (!run.metrics.count(metric)) {
      fmt::print(stderr, "plot: run '{}' has no '{}' ({}); left out\n", run.path, metric,
                 join(run.metrics));
      continue;
    }
    // One curve per split, in the order the splits first appear (training first).
    std::vector<Curve> curves{{"train", {}, false, 0}};
    for (const auto& line : run.lines) {
      double v;
      if (!line.is_object() || !number_at(line, metric, v)) continue;
      const int64_t step = line.value("step", int64_t{0});
      const std::string split = is_training_line(line) ? "train" : evaluation_split(line);
      if (split.empty()) continue;
      auto it = std::find_if(curves.begin(), curves.end(),
                             [&](const Curve& c) { return c.split == split; });
      if (it == curves.end()) {
        curves.push_back({split, {}, false, 0});
        it = curves.end() - 1;
      }
      it->points.emplace_back(step, v * scale);
      if (line.value("final", false)) {
        it->has_final = true;
        it->final_value = v * scale;
      }
    }
    // The final held-out figure: the held-out split's final evaluation (else its last one).
    const std::string held_out = held_out_split(run.lines);
    std::string final_note;
    for (const auto& c : curves)
      if (c.split == held_out && !c.points.empty()) {
        const double v = c.has_final ? c.final_value : c.points.back().second;
        final_note = fmt::format(", {} {:.4g}{}", c.has_final ? "final" : "last", v,
                                 metric == "accuracy" ? "%" : "");
        break;
      }
    const std::string params =
        run.parameters >= 0 ? fmt::format(", {} params", short_count(run.parameters)) : "";
    const std::string color = colors[i % colors.size()];
    int point_type = 0;
    for (const auto& c : curves) {
      if (c.points.empty()) continue;
      const std::string file = fmt::format("r{}_{}.dat", i, &c - curves.data());
      const std::string title =
          c.split == "train"
              ? run.name + ": training" + params
              : run.name + ": " + c.split + (c.split == "train_eval" ? "" : " (held out)") +
                    (c.split == held_out ? final_note : "");
      std::string data = column_header(title) + "\n";
      for (const auto& [step, v] : c.points) {
        data += fmt::format("{} {:.9g}\n", step, v);
        max_step = std::max(max_step, step);
      }
      job.files.emplace_back(file, data);
      static const int kPointTypes[] = {7, 5, 9, 11, 13};
      if (c.split == "train")
        plots.push_back(fmt::format("'{}' using 1:2 with lines lc rgb '#60{}' lw 1.2 title columnheader",
                                    file, color.substr(1)));
      else
        plots.push_back(fmt::format(
            "'{}' using 1:2 with linespoints lc rgb '{}' lw 2 pt {} ps 1.1 title columnheader",
            file, color, kPointTypes[point_type++ % 5]));
    }
  }

  if (plots.empty())
    throw std::runtime_error("plot: no training or evaluation line of the runs has '" + metric +
                             "' (lines without \"split\")");
  const std::map<std::string, std::string> ylabel = {
      {"bpc", "bits per byte"},
      {"loss", "loss (nats per token or per example)"},
      {"accuracy", "accuracy (%)"},
      {"lr", "learning rate"}};
  std::ostringstream gp;
  gp << "# seqmix plot: " << metric << " against the step; data in r*_*.dat\n"
     << gnuplot_terminal(output, 1280, 760) << "set output '" << output << "'\n"
     << "set title 'seqmix: " << metric << " by step"
     << (metric == "lr" ? "" : " (thin line: training; points: evaluations)") << "'\n"
     << "set xlabel 'step'\nset ylabel '" << ylabel.at(metric) << "'\n"
     << "set grid\nset key outside below vertical maxrows 8 height 1\n"
     << "set xrange [0:" << max_step + std::max<int64_t>(1, max_step / 50) << "]\n"
     << (metric == "lr" ? "set format y '%.1e'\n" : "") << "plot \\\n";
  for (size_t k = 0; k < plots.size(); ++k)
    gp << "  " << plots[k] << (k + 1 < plots.size() ? ", \\\n" : "\n");
  job.script = gp.str();
  job.output = output;
  try {
    run_gnuplot(job, result.path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("plot: ") + e.what());
  }
  return result;
}

}  // namespace seqmix::train
