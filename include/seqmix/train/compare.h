#pragma once
/// @file compare.h
/// Fair comparison of several models (the Extractor paper's Figs. 4-8): every model trains on
/// exactly the same batches in the same order, and the training cost of every batch is
/// plotted with its median and quartiles per bucket of batches.
///
/// Why the batches are the same: `data::sample_batch` depends only on (seed, step, batch
/// size, max_len, token stream), so `compare` requires those to agree across the models and
/// trains each one with the trainer of trainer.h. Each model gets its own run folder
/// (config.toml, metrics.jsonl with one training line per batch, checkpoint.pt), so any of
/// them can be evaluated, resumed or sampled from afterwards like any `seqmix train` run.
///
/// Output folder: <name>/ per model; compare.dat (per model and bucket: first and last batch,
/// median, lower and upper quartile of the per-batch cost in nats), compare_batches.dat (per
/// model: batch, cost), compare_eval.dat (per model: step and held-out figure of every
/// evaluation), summary.jsonl (one line per model: parameters, final training and held-out
/// cost, perplexity, bpc, training seconds), compare.gp (the gnuplot script; it names only
/// those data files, so `gnuplot compare.gp` in the folder redraws the picture) and
/// compare.png.
///
/// compare.png: top panel, the training cost of every batch (faint), and the quartile band and
/// median of every bucket of batches per model; the y axis spans the buckets' quartiles, and
/// when single batches lie beyond it a line on stderr says how many are clipped. Bottom panel:
/// the held-out figure at every evaluation (bpc when every model reports it, else accuracy in
/// percent for classifiers, else the loss). The legend gives each model's parameter count and
/// final held-out figure. gnuplot runs through run_gnuplot (plot.h): no path or user text
/// reaches its command language.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "seqmix/train/config.h"

namespace seqmix::dist {
class ProcessGroup;  // seqmix/dist/process_group.h
}

namespace seqmix::train {

/// One model of a comparison: a name (its run folder) and the overrides that make it.
struct CompareModel {
  std::string name;                    ///< [A-Za-z0-9._-]+, unique
  std::vector<std::string> overrides;  ///< "section.key=value", applied after the shared ones
};

/// Parses "NAME=PRESET [section.key=value ...]" (whitespace-separated), e.g.
/// "extractor-no-adjust=extractor-transformer model.extractor.adjust=false".
/// @throws std::invalid_argument naming the spec if it does not have that form.
CompareModel parse_compare_model(const std::string& spec);

struct CompareOptions {
  std::string out_dir;                        ///< created if missing
  std::string config_path;                    ///< shared TOML config (may be empty)
  std::vector<std::string> shared_overrides;  ///< applied to every model first
  std::vector<CompareModel> models;           ///< at least one
  /// Batches per median/quartile bucket; 0: compare_bucket picks it from train.max_steps.
  int64_t bucket = 0;
  int64_t report_interval = 100;              ///< steps between progress lines (non-TTY)
  /// Data-parallel: every model trains on all ranks of the group (trainer.h's
  /// TrainOptions::group); rank 0 alone writes the folder, summary.jsonl and the plot, and
  /// the other ranks return an empty result.
  std::shared_ptr<dist::ProcessGroup> group;
};

/// Per-model outcome (also one line of summary.jsonl).
struct CompareRow {
  std::string name, preset;
  int64_t parameters = 0;
  int64_t steps = 0;
  double train_loss = 0;       ///< median training cost of the last bucket, nats per token
  double eval_loss = 0;        ///< held-out nats per token (whole split)
  double eval_perplexity = 0;  ///< exp(eval_loss)
  double eval_bpc = 0;         ///< held-out bits per byte of text
  double seconds = 0;          ///< time spent in training steps (from the metrics file, so
                               ///< also for reused runs; evaluations excluded)
  bool reused = false;         ///< the run folder already held the finished run
};

struct CompareResult {
  std::vector<CompareRow> rows;
  std::string plot;  ///< path of compare.png
};

/// The bucket size compare uses: `bucket` if positive, else max(1, max_steps / 20) (twenty
/// buckets over the run).
int64_t compare_bucket(int64_t bucket, int64_t max_steps);

/// Resolves and checks every model's configuration, as compare does before anything else, and
/// creates nothing: for callers that prepare the output folder (lock it) only for a
/// comparison that can start.
/// @throws std::invalid_argument / std::runtime_error as compare does for its options.
std::vector<RunConfig> resolve_compare(const CompareOptions& options);

/// Resolves every model's configuration first (so a bad key fails before any training),
/// checks that they all draw the same batches, then trains them one after the other. A model
/// whose run folder already holds the finished run (same configuration) is not retrained; an
/// unfinished one is resumed.
/// Paths with control characters (--out, --config, data.source, data.dir, data.tokenizer) are
/// refused before anything is created. The runs and summary.jsonl are written before the
/// picture is drawn, so they survive a plotting failure.
/// @throws std::invalid_argument naming the flag whose path holds a control character.
/// @throws std::runtime_error naming the model and the key that breaks the comparison (e.g.
///         a different train.seed), whatever the trainer throws, or "compare: gnuplot failed
///         (...)" / "compare: gnuplot not found ..." after the runs are written.
CompareResult compare(const CompareOptions& options);

/// Lower quartile, median and upper quartile of `values` (linear interpolation between
/// order statistics, numpy's default). @throws std::invalid_argument if empty.
std::vector<double> quartiles(std::vector<double> values);

}  // namespace seqmix::train
