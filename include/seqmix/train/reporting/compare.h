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
/// Seeds: with `seeds` = S > 1 the whole comparison runs S times, with train.seed = s0, s0 + 1,
/// ..., s0 + S - 1 (s0 the resolved train.seed, 1337 unless set): the folder seed-<s>/ holds
/// that seed's comparison as above (every model on that seed's batches, with that seed's
/// initialisation). The top folder then holds summary.jsonl with one line per model: the
/// held-out figure of every seed, their mean and sample standard deviation; pairs.jsonl with
/// one line per pair of models: the gap between their means, its standard error and the
/// verdict (seed_verdict); seeds.dat, seeds.gp and seeds.png (mean +- sd per model). The
/// figure is test accuracy for classifiers (data.task), held-out bpc for language models
/// (held-out loss when no bpc is reported). With S = 1 the folder is laid out as without
/// seeds (<name>/ per model).
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
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/train/configuration/config.h"

namespace seqmix::dist {
class ProcessGroup;  // seqmix/dist/process_group.h
}

namespace seqmix::train {

/// One model of a comparison: a name (its run folder) and the overrides that make it.
struct CompareModel {
  std::string name;                    ///< [A-Za-z0-9._-]+, unique
  std::vector<Override> overrides;  ///< applied after the shared ones
};

/// Parses "NAME=PRESET [section.key=value ...]" (whitespace-separated), e.g.
/// "extractor-no-adjust=extractor-transformer model.extractor.adjust=false".
/// @throws std::invalid_argument naming the spec if it does not have that form, or an override
///         in it names an unknown key or gives a value of another type.
CompareModel parse_compare_model(const std::string& spec);

struct CompareOptions {
  std::string out_dir;                        ///< created if missing
  std::string config_path;                    ///< shared TOML config (may be empty)
  std::vector<Override> shared_overrides;     ///< applied to every model first
  std::vector<CompareModel> models;           ///< at least one
  /// Batches per median/quartile bucket; 0: compare_bucket picks it from train.max_steps.
  int64_t bucket = 0;
  /// Training seeds per model (train.seed, train.seed + 1, ...), in [1, kMaxSeeds].
  int64_t seeds = 3;
  static constexpr int64_t kMaxSeeds = 100;
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
  /// Classifiers (data.task): accuracies of the final evaluation, fractions in [0, 1].
  double eval_accuracy = 0, test_accuracy = 0, train_accuracy = 0;
  /// The test split's majority-class fraction (its chance level; 0 for a run whose metrics
  /// file predates the "majority" key).
  double test_majority = 0;
  int64_t test_examples = 0;   ///< size of the test split (0: not a classifier)
  int64_t seed = 0;            ///< the run's train.seed
  bool classifier = false;     ///< data.task is set: the accuracies are meaningful
  double seconds = 0;          ///< time spent in training steps (from the metrics file, so
                               ///< also for reused runs; evaluations excluded)
  bool reused = false;         ///< the run folder already held the finished run
};

/// One model's held-out figure over the seeds (a line of the top summary.jsonl).
struct SeedSummary {
  std::string name, preset;
  int64_t parameters = 0;
  std::string metric;          ///< "test_accuracy", "bpc" or "loss"
  bool higher_is_better = false;
  std::vector<int64_t> seeds;
  std::vector<double> values;  ///< the figure of each seed, in `seeds` order
  double mean = 0, sd = 0;     ///< sd: sample standard deviation (n - 1); 0 for one seed
  /// Classifiers: the test split's chance level (its majority-class fraction), the bound
  /// chance_bound(chance, test examples) below which a mean is at chance, and whether the
  /// mean is below it. 0, 0, false where the runs do not say (language models).
  double chance = 0, chance_bound = 0;
  int64_t test_examples = 0;
  bool at_chance = false;
  /// How many seeds' figures are at or below chance_bound. The verdicts test the mean only,
  /// so a mean above chance can hide seeds that learned nothing; this says how many.
  int64_t seeds_at_chance = 0;
};

/// Two models' figures compared (a line of pairs.jsonl): gap = mean(a) - mean(b), se its
/// standard error sqrt(sd_a^2 / n_a + sd_b^2 / n_b).
struct SeedPair {
  std::string a, b;
  double gap = 0, se = 0;
  /// "not comparable" when either model's mean is at chance (SeedSummary::at_chance: a model
  /// that learned nothing is not beaten, and does not beat); else "a" or "b" (the better
  /// model) when |gap| >= 3 se and se > 0; "tie" when |gap| < 3 se; "undecided" with one
  /// seed (no standard error to judge an ordering by).
  std::string verdict;
};

struct CompareResult {
  std::vector<CompareRow> rows;        ///< every model of every seed, seed by seed
  std::vector<SeedSummary> summaries;  ///< per model (filled when seeds > 1)
  std::vector<SeedPair> pairs;         ///< per pair of models (filled when seeds > 1)
  std::string plot;  ///< path of compare.png (one seed) or seeds.png (several)
};

/// Mean and sample standard deviation (divisor n - 1; 0 for n = 1).
/// @throws std::invalid_argument if `values` is empty.
std::pair<double, double> mean_sd(const std::vector<double>& values);

/// The verdict on two summaries: their gap, its standard error and "not comparable" / "a" /
/// "b" / "tie" / "undecided" as SeedPair says. A gap under three standard errors is never an
/// ordering, and neither is a gap to a model at chance.
SeedPair seed_verdict(const SeedSummary& a, const SeedSummary& b);

/// The accuracy at or below which a classifier is "at chance" on a test split of `n`
/// examples whose majority class has fraction `p`: p + 5 sqrt(p (1 - p) / n), five binomial
/// standard errors above the majority-class rate. (A model that always answers the majority
/// class scores p; 5 SE leaves a chance of about 3e-7 that guessing clears the bound.)
/// @throws std::invalid_argument unless 0 <= p <= 1 and n >= 1.
double chance_bound(double p, int64_t n);

/// JSON lines of summary.jsonl / pairs.jsonl (nlohmann's to_json, so `json j = row;`).
/// A row's "loss", "perplexity", "bpc" are the held-out figures; a classifier's also carry
/// "accuracy" (held-out), "test_accuracy", "train_accuracy" and, when known,
/// "test_majority".
void to_json(nlohmann::json& j, const CompareRow& row);
void to_json(nlohmann::json& j, const SeedSummary& s);
void to_json(nlohmann::json& j, const SeedPair& p);

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
/// Paths with control characters (out_dir, config_path, data.source, data.dir, data.tokenizer) are
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
