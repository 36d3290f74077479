#pragma once
/// @file plot.h
/// Pictures of training runs with gnuplot, and the one way seqmix runs gnuplot.
///
/// No user text ever reaches gnuplot's command language (which can run shell commands):
/// a script names its data files and its output by fixed names (`r0_train.dat`,
/// `plot.png`, ...); `run_gnuplot` writes them into a private temporary folder, runs gnuplot
/// there without a shell (posix_spawnp, argument `plot.gp`), and renames the picture into
/// place. Text from users that belongs in a picture (run folder names in a legend) goes into
/// the data files as column headers and is read with `title columnheader`: gnuplot takes it
/// as text, never as commands.
///
/// `seqmix plot RUN... [--metric bpc|loss|accuracy|lr] [--out FILE.png|.svg]` is
/// `plot_runs`: the training curve (one point per training line of metrics.jsonl) and the
/// held-out curves (one per evaluation split: valid / eval, test, train_eval) of every run,
/// against the step, in one picture.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace seqmix::train {

/// A gnuplot run: a script and the files it reads, all under fixed names.
struct GnuplotJob {
  /// gnuplot commands; may name only the files below and `output`, never a user's text.
  std::string script;
  /// (name, content) of every data file; names of letters, digits, '.', '_' and '-'.
  std::vector<std::pair<std::string, std::string>> files;
  /// The name the script writes its picture to (e.g. "plot.png").
  std::string output;
};

/// Runs `job` with gnuplot in a private temporary folder created beside `destination` (so the
/// final rename is atomic), then renames the picture to `destination`. The temporary folder is
/// removed in every case; on failure `destination` is left as it was.
/// @throws std::invalid_argument if a file name of the job is not a plain fixed name.
/// @throws std::runtime_error "gnuplot not found on PATH (...)", "gnuplot failed (exit status
///         N): <its error message>", or naming the folder that could not be written.
void run_gnuplot(const GnuplotJob& job, const std::string& destination);

/// `text` as a double-quoted column header of a gnuplot data file (for `title columnheader`):
/// '"' becomes '\'' and control characters become '?', so it stays one header field.
std::string column_header(const std::string& text);

/// The gnuplot `set terminal` line for a picture named `output_name` (.png: pngcairo,
/// .svg: svg), `width` x `height` pixels, plain (noenhanced) text.
/// @throws std::invalid_argument if the name ends in neither .png nor .svg.
std::string gnuplot_terminal(const std::string& output_name, int width, int height);

/// True for a training-step line of metrics.jsonl: "split": "train" and no "final" key
/// (every evaluation line carries "final", also an evaluation of the training split).
bool is_training_line(const nlohmann::json& line);

/// The split an evaluation line scored, as written ("valid", "eval", "test", "train_eval"),
/// with older files' evaluation of the training split ("train" with "final") read as
/// "train_eval"; "" for a training line or a line without "split".
std::string evaluation_split(const nlohmann::json& line);

/// The held-out split of a run: the split its periodic (and final) evaluations score, i.e.
/// that of its first evaluation line other than train_eval ("valid", "test" for a language
/// model with data.eval_split = test, "eval" in older files); "" if there is none.
std::string held_out_split(const std::vector<nlohmann::json>& lines);

struct PlotOptions {
  /// Run folders (each with metrics.jsonl; config.toml, when present, gives the parameter
  /// count for the legend). At least one.
  std::vector<std::string> runs;
  /// bpc | loss | accuracy | lr. Empty: bpc when a training line of some run carries it
  /// (byte-level language models), else loss.
  std::string metric;
  /// The picture, ending in .png or .svg; its folder must exist. Empty: `<run>/plot_<metric>.png`
  /// with one run; required with several.
  std::string out;
};

struct PlotResult {
  std::string path;    ///< the picture written
  std::string metric;  ///< the metric drawn (the one chosen when PlotOptions::metric was empty)
};

/// Draws `metric` against the step for every run: the training lines as a thin line, each
/// evaluation split (valid / eval, test, train_eval) as points joined by lines. Legend: the
/// run folder's name, its parameter count (if config.toml can be read) and the final held-out
/// figure. Accuracy is drawn in percent. A run without the metric is left out with a note on
/// stderr.
/// @throws std::invalid_argument for a path with control characters, an unknown metric, an
///         --out not ending in .png/.svg, several runs without --out.
/// @throws std::runtime_error for a run folder that does not exist or has no metrics.jsonl, a
///         metric that no run has (naming the metrics each run has), or a gnuplot failure.
PlotResult plot_runs(const PlotOptions& options);

}  // namespace seqmix::train
