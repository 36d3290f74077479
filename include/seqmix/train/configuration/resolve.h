#pragma once
/// @file resolve.h
/// The run layer between a front end (the command line, and later bindings or a launcher of
/// several processes) and the library: turning what a user asks for into a checked
/// configuration, a loaded model or the data an evaluation scores. Configuration resolution
/// itself (preset, then TOML file, then overrides) is resolve_config in config.h; what is
/// here decides the things around it that every front end would otherwise repeat: a
/// tokenizer's piece count becoming model.vocab_size, a resumed run's configuration coming
/// from its checkpoint, a stored run's model and tokenizer, its evaluation split.
///
/// Example:
///   RunRequest request;
///   request.tokenizer = "runs/moby-bpe5000.model";  // sets model.vocab_size = 5000
///   request.overrides = {"model.preset=extractor-transformer", "train.max_steps=600"};
///   const RunConfig config = resolve_run(request);
///   std::cerr << config_summary(config);
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/trainer.h"

namespace seqmix::train {

/// What a configuration is made of, in the order it applies (config.h).
struct RunRequest {
  std::string config_path;  ///< TOML file, or empty
  /// A tokenizer given by itself ("bytes" or a SentencePiece model file), or empty: when
  /// given, it sets data.tokenizer and model.vocab_size (tokenizer_overrides) before
  /// `overrides`, which may still change them.
  std::string tokenizer;
  std::vector<Override> overrides;  ///< applied in order (config.h)
};

/// The overrides a tokenizer given by itself amounts to: data.tokenizer = `tokenizer` and
/// model.vocab_size = its piece count (256 for "bytes"). The model file is read to count its
/// pieces.
/// @throws std::runtime_error naming data.tokenizer if the file is not a SentencePiece model
///         (see data::Tokenizer::load).
std::vector<Override> tokenizer_overrides(const std::string& tokenizer);

/// resolve_config(request.config_path, tokenizer_overrides(request.tokenizer) +
/// request.overrides, base): a configuration checked by validate() and check_resources().
/// `base` (a resumed run's stored configuration) replaces the preset as the starting point.
/// @throws std::runtime_error as resolve_config and tokenizer_overrides do.
RunConfig resolve_run(const RunRequest& request, const RunConfig* base = nullptr);

/// The tokenizer `config` names (data.tokenizer: "bytes" or a SentencePiece model file),
/// checked against the model it feeds: a language model's model.vocab_size must be the
/// tokenizer's piece count (a classifier's vocabulary is its task's, and is not checked).
/// @throws std::runtime_error "model.vocab_size is 256 but tokenizer 'bpe.model' has 300
///         pieces; set model.vocab_size=300 (the --tokenizer option does so)", or the
///         tokenizer's own error for a file that is not a SentencePiece model.
data::Tokenizer resolve_tokenizer(const RunConfig& config);

/// The vocabulary check of resolve_tokenizer, for a tokenizer obtained otherwise (a
/// checkpoint's). @throws std::runtime_error as resolve_tokenizer.
void check_tokenizer(const RunConfig& config, const data::Tokenizer& tokenizer);

/// A training run ready for train(): its configuration and the options that say where it
/// goes.
struct TrainingRun {
  RunConfig config;
  /// out_dir and resume as asked; when resuming, also the run folder's lock (taken before
  /// its checkpoint is read, when the folder exists) and that checkpoint, opened once.
  TrainOptions options;
};

/// The options of a training run into `out_dir` before its configuration is resolved: out_dir
/// and resume as given; when resuming, the run folder's lock (taken before its checkpoint is
/// read, when the folder exists, so a process training in it cannot replace the checkpoint
/// in between) and the checkpoint, opened once; its config() is the base that resolve_run
/// starts from.
/// With `group` (a data-parallel job): rank 0 does the above, the other ranks touch no file
/// of the folder; when resuming, rank 0's checkpoint is sent to every rank (so the folder
/// need exist on rank 0's machine only), and every rank's options carry it and the group.
/// @throws std::invalid_argument "`resume` needs `out_dir`, the run folder to resume" when
///         resuming without `out_dir`; std::runtime_error as util::check_path_text for an
///         `out_dir` with control characters, as util::FolderLock when another process trains
///         in the folder, as CheckpointFile for a missing or corrupt checkpoint. With a group,
///         on every rank when it fails on one.
TrainOptions open_training_folder(const std::string& out_dir, bool resume,
                                  std::shared_ptr<dist::ProcessGroup> group = nullptr);

/// A training run as a front end asks for it: what its configuration is made of, its run
/// folder, and how to treat what the folder already holds.
struct TrainingRequest {
  RunRequest config;  ///< preset, TOML file, tokenizer and overrides
  /// A configuration resolved already (compare resolves every model's before it trains
  /// any), used instead of `config`. When resuming, train() checks it against the
  /// checkpoint's.
  std::optional<RunConfig> resolved;
  std::string out_dir;  ///< the run folder (TrainOptions::out_dir); "" only to resolve
  bool resume = false;  ///< TrainOptions::resume: the configuration starts from the checkpoint's
  bool overwrite = false;          ///< TrainOptions::overwrite
  bool allow_data_change = false;  ///< TrainOptions::allow_data_change; needs `resume`
  int64_t report_interval = 0;     ///< TrainOptions::report_interval
  /// The data-parallel job this process is a rank of (dist/process_group.h), or null.
  std::shared_ptr<dist::ProcessGroup> group;
};

/// The set-up of a training run, the same for every front end (the CLI's train and compare,
/// seqmix.train in Python): open the run folder (open_training_folder: lock it and read its
/// checkpoint when resuming), resolve the configuration against that checkpoint's
/// (resolve_run; a resumed run starts from its stored configuration, the request's
/// overrides apply on top, and train() then refuses changes other than the length and
/// reporting of the run), and, in a data-parallel job, agree across ranks: when any rank
/// fails, every rank throws. Creates nothing: an `out_dir` that does not exist yet is
/// created by train().
/// @throws std::invalid_argument "`allow_data_change` applies to `resume` only"; as
///         open_training_folder and resolve_run.
TrainingRun prepare_training(const TrainingRequest& request);

/// A run trained to its end: its configuration and train()'s figures.
struct FinishedRun {
  RunConfig config;
  TrainResult result;
};

/// prepare_training, then train(): a run started from a request, as every front end
/// starts one.
/// @throws std::invalid_argument "`out_dir`: a training run needs its run folder" when
///         `out_dir` is empty; as prepare_training and train() (Interrupted after SIGINT or
///         SIGTERM).
FinishedRun run_training(const TrainingRequest& request);

/// The model of a run folder or checkpoint file, with its configuration and tokenizer.
struct LoadedRun {
  RunConfig config;
  data::Tokenizer tokenizer = data::Tokenizer::bytes();
  models::SequenceModel model{nullptr};  ///< in eval mode
};

/// A run folder's config.toml is the readable copy of the configuration its checkpoint.pt
/// holds, which is the run's; seqmix never reads the copy back. Where `checkpoint_path` is
/// a run folder's checkpoint.pt and the folder holds a config.toml, that file must parse
/// (RunConfig::from_toml) to the same configuration as `stored`: a hand edit would
/// otherwise be ignored by eval and generate, and overwritten by --resume.
/// @throws std::runtime_error naming the file and up to four differing keys with both
///         values, or the TOML error, and saying how to go on.
void check_config_copy(const std::string& checkpoint_path, const RunConfig& stored);

/// Loads `run` (a run folder or a checkpoint file; find_checkpoint) for evaluation or
/// generation: the checkpoint is read and verified once, its configuration checked against
/// this machine (RunConfig::check_resources(false): a model too large to hold is refused
/// before it is built), then the weights loaded.
/// @throws std::runtime_error naming the path: missing, corrupt or incompatible checkpoint
///         (CheckpointFile), a configuration this machine cannot hold, or a config.toml
///         beside it that differs (check_config_copy).
LoadedRun load_run(const std::string& run);

/// What an evaluation of a stored run should score, beside the run's own configuration.
struct EvalRequest {
  std::string run;       ///< the run folder or checkpoint as the user named it (for messages)
  std::string data;      ///< corpus instead of the run's data.source ("" = the run's own)
  std::string data_dir;  ///< data folder instead of the run's data.dir ("" = the run's own)
  /// Language models: "valid" or "test" (enwik8/text8), "" = the run's data.eval_split.
  /// Classifiers: "train", "valid" or "test", "" = "test".
  std::string split;
};

/// The held-out data of an evaluation, built from a stored configuration plus the request.
struct EvalSet {
  bool classification = false;  ///< a classifier (data.task set): `examples`, else `tokens`
  std::string split;            ///< the split scored
  data::TokenIds tokens;        ///< language model: the split's token stream
  std::vector<data::LabelledSequence> examples;  ///< classifier: the split's examples
};

/// Applies the request to `config` (data.dir, and for language models data.source and
/// data.eval_split, which the caller reports) and loads what it names: a language model's
/// corpus encoded with `tokenizer`, or a classifier's task split.
/// @throws std::invalid_argument "`data`: '<run>' is a classifier on task '<task>', which
///         brings its own data; give `split` instead" when a classifier is given `data`.
/// @throws std::runtime_error "`split`: a task has the splits train, valid and test, got
///         '<split>'", or as data::ByteCorpus::load, data::TokenCorpus::build and
///         data::load_task for missing or unusable data.
EvalSet load_eval_set(RunConfig& config, const data::Tokenizer& tokenizer,
                      const EvalRequest& request);

/// The resolved configuration in brief, one line per section of RunConfig::to_toml() (a
/// nested table such as [model.aib] gets its own line "model.aib: ..."), each
/// "<section>: key=value key=value ...": keys in the order to_toml writes them, except that
/// a section's preset and size come first; strings bare (quoted only when empty or holding
/// spaces), arrays as [a,b], numbers in their shortest exact form. Every line ends in '\n'.
/// Built from the TOML text, so sections added to the configuration appear without change
/// here. Of the mixer sections ([model.aib], ...), only those of the mixers in model.mixers.
std::string config_summary(const RunConfig& config);

}  // namespace seqmix::train
