#pragma once
/// @file trainer.h
/// Training loop for language models (bytes or SentencePiece tokens) and for classifiers on
/// the labelled tasks (data/tasks.h; config data.task): AdamW (decoupled weight decay on weight
/// matrices only), linear warm-up then cosine/linear decay, global-norm gradient clipping,
/// periodic evaluation, metrics.jsonl, atomic checkpoints and exact resumption.
///
/// Run folder layout: config.toml (resolved configuration), metrics.jsonl, checkpoint.pt, and
/// tokenizer.model for SentencePiece runs.
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include <torch/optim/adamw.h>

#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"

namespace seqmix::util {
class FolderLock;  // seqmix/util/run_folder.h
}
namespace seqmix::dist {
class ProcessGroup;  // seqmix/dist/process_group.h
}

namespace seqmix::train {

class CheckpointFile;  // seqmix/train/serialization/checkpoint.h

struct TrainOptions {
  /// Run folder (created if missing). It is locked while train() runs (a second process
  /// fails at once), and must not already hold a run (checkpoint.pt, config.toml or
  /// metrics.jsonl) unless `resume` or `overwrite` says what to do with it.
  std::string out_dir;
  bool resume = false;  ///< continue from out_dir/checkpoint.pt
  /// Replace the run in out_dir. The old run's files stay as they were until the new run
  /// writes its first checkpoint; a new run that fails before that leaves them untouched.
  bool overwrite = false;
  /// The run folder's lock, when the caller took it (util::FolderLock on out_dir) before
  /// reading its checkpoint; train() takes it itself when null.
  std::shared_ptr<util::FolderLock> lock;
  /// With `resume`: out_dir/checkpoint.pt already opened by the caller (who read its
  /// configuration), so the file is read and verified once; opened here when null. Closed
  /// once its state is loaded.
  std::shared_ptr<CheckpointFile> checkpoint;
  /// With `resume`: go on although the training or held-out data differ from those the
  /// checkpoint was trained on (its data fingerprint); refused otherwise, naming the sizes.
  bool allow_data_change = false;
  /// Steps between progress lines when stderr is not a terminal (0 = every log line).
  int64_t report_interval = 0;
  /// Testing aid: return right after the checkpoint written at this step, as if the process
  /// had been killed there (-1 = never).
  int64_t halt_after_step = -1;
  /// Data-parallel training (dist/process_group.h); null trains in this process alone. Every
  /// rank calls train() with the same configuration (checked: configuration, data and code
  /// version must agree, or every rank throws naming the difference). The global batch of step
  /// s (train.batch_size, a function of the seed and s alone) is split into world_size equal
  /// shards, rank r taking the r-th; rank 0's initial parameters are broadcast; gradients are
  /// averaged over ranks by bucketed all-reduce overlapping backward (dist/reducer.h), so
  /// clipping and the non-finite check see the global gradient and every rank takes the same
  /// optimizer step. Evaluations are sharded by batch and summed. Only rank 0 touches the run
  /// folder (lock, metrics, checkpoints); other ranks need `checkpoint` set when resuming
  /// (open_training_folder in resolve.h broadcasts it). Dropout masks are drawn per rank
  /// from (seed, step, rank), so runs with dropout match a one-process run in distribution,
  /// not bit for bit.
  std::shared_ptr<dist::ProcessGroup> group;
  /// Testing aid: called after each backward pass with the step number (1-based) and the
  /// model, e.g. to plant a NaN gradient.
  std::function<void(int64_t step, models::SequenceModel& model)> after_backward;
};

struct TrainResult {
  int64_t steps = 0;            ///< optimizer steps done in total
  /// Mean training loss over the last log interval, nats; NaN (null in JSON) when no step was
  /// trained (--max-steps 0: a checkpoint of the initial model).
  double final_train_loss = std::numeric_limits<double>::quiet_NaN();
  double eval_bpc = 0;          ///< held-out bits per character of the final evaluation
  double eval_loss = 0;         ///< held-out nats per token
  double eval_perplexity = 0;   ///< exp(eval_loss)
  /// Classification runs (data.task): eval_loss is the validation cross-entropy (nats per
  /// example); accuracies are fractions in [0, 1] from the final evaluation.
  double eval_accuracy = 0;   ///< validation split
  double test_accuracy = 0;   ///< test split
  double test_loss = 0;       ///< test split, nats per example
  double train_accuracy = 0;  ///< the first |test| training examples, in eval mode
  double test_majority = 0;   ///< the test split's majority-class share (its chance level)
  bool halted = false;          ///< stopped by halt_after_step
  int64_t skipped_steps = 0;    ///< steps skipped for a non-finite loss or gradient
  /// Wall time of the run, seconds: setup, steps and evaluations. A resumed run adds its own
  /// to the time stored in the checkpoint it resumed from, so steps redone after an
  /// interruption count once and the time between the checkpoint and the interruption not.
  double seconds = 0;
};

/// Thrown by train() when SIGINT or SIGTERM asked it to stop (util/signals.h): the step in
/// progress was finished and checkpointed, and the run resumes from there with --resume.
struct Interrupted : std::runtime_error {
  Interrupted(const std::string& what, int signal, int64_t step, std::string checkpoint)
      : std::runtime_error(what), signal(signal), step(step), checkpoint(std::move(checkpoint)) {}
  int signal;              ///< SIGINT or SIGTERM
  int64_t step;            ///< optimizer steps done in total
  std::string checkpoint;  ///< the checkpoint written for `step` (empty if none was)
};

/// Watches the training loss for a spike: check() returns a warning (once per run) when a
/// step's loss exceeds 5x the median of the last (up to) 100 steps, given at least 20 of
/// them; a spike often precedes divergence, and is worth seeing before it becomes a NaN.
class LossSpikeWatch {
 public:
  /// `loss` of optimizer step `step` (1-based), nats. Returns the warning, or "".
  std::string check(int64_t step, double loss);

 private:
  static constexpr size_t kWindow = 100, kMinSteps = 20;
  std::deque<double> recent_;
  bool warned_ = false;
};

/// Trains a model as `config` says. On resume the configuration stored in the checkpoint is
/// used, with `config`'s training section (max_steps, intervals, threads) taking over.
/// Resuming cannot shorten a run below its checkpoint's step; resuming a finished run trains
/// and writes nothing. A larger max_steps keeps the learning-rate schedule's horizon
/// (train.decay_steps) unless the configuration changes it, and says so.
///
/// The run folder: config.toml always describes checkpoint.pt (it is written with the first
/// checkpoint of a resumed or overwriting run); metrics.jsonl gets one JSON object per line,
/// each with "step" and "time_s" (the run's wall time, seconds): training lines
/// {"split": "train", "loss", "lr", "grad_norm", "grad_norms", ...} (grad_norm: the logged
/// step's global gradient norm before clipping; grad_norms: the same per part of the model,
/// {"tok_emb": ..., "blocks.0": ..., ...}), evaluation lines {"split": "valid" |
/// "test" | "train_eval", "final", ...} and events {"event": "skipped_step" | "warning" |
/// "interrupted", ...}. A run that fails before its first checkpoint removes the files it
/// created (and the folder, if it created it).
///
/// Progress goes to stderr: a start line (model, threads, BLAS, data, batch shape), then the
/// resolved configuration in brief (config_summary in resolve.h, one line per section).
///
/// Between steps train() polls util::stop_signal(): after SIGINT or SIGTERM it finishes the
/// step, checkpoints it and throws Interrupted.
/// A step whose loss or any gradient is NaN or infinite stops training (train.nonfinite =
/// "stop": std::runtime_error naming the step and the first such parameter; no checkpoint
/// is written after the last good one) or is skipped without an update ("skip": a metrics
/// line {"event": "skipped_step", "reason": ...}).
/// @throws std::runtime_error with a message naming the file/key at fault (data missing,
///         incompatible checkpoint, unwritable run folder, ...).
TrainResult train(const RunConfig& config, const TrainOptions& options);

/// The optimizer train() uses for `model`: AdamW with train.lr, beta1, beta2 and eps, and
/// train.weight_decay on the weight matrices only (parameters whose name ends in "weight"
/// with two or more dimensions); biases, norms, positional embeddings and the AIB distance
/// parameters get none. Its parameter groups are what checkpoints store, so save_run
/// (export.h) builds a resumable checkpoint with it.
std::unique_ptr<torch::optim::AdamW> make_optimizer(models::SequenceModel& model,
                                                    const TrainConfig& t);

}  // namespace seqmix::train
