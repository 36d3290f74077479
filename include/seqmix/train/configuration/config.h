#pragma once
/// @file config.h
/// The resolved run configuration: model architecture, data and training hyper-parameters.
///
/// Resolution order (Marian-style: every run prints and saves the resolved result):
///   1. the model preset (`model.preset`, `model.size`; see models/presets.h) and defaults;
///   2. a TOML config file with sections [model] (and its mixer sections [model.aib],
///      [model.attention], [model.ces], [model.extractor]; models/model_config.h), [data],
///      [train];
///   3. overrides of single keys (Override): typed values from a front end's own options
///      (`--lr 1e-3` is the double 1e-3), or `section.key=value` text, e.g.
///      `model.aib.weights=exp`, parsed once into the key's type.
/// Unknown sections or keys, and values of the wrong type, are errors naming the key.
///
/// Example:
///   auto c = seqmix::train::resolve_config(
///       "", {"model.preset=moss", {"train.lr", 1e-3}, {"train.max_steps", int64_t{600}}});
///   std::cout << c.to_toml();  // what --dump-config prints
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "seqmix/models/sequence_model.h"
#include "seqmix/util/fields.h"

namespace seqmix::train {

struct DataConfig {
  std::string source = "sotu";       ///< corpus name or path (data/byte_corpus.h)
  /// The folder scripts/setup.sh fills, where named corpora and task data are looked for.
  /// Empty (the default) means the default lookup, done when the data is loaded
  /// (data::resolve_data_dir): $SEQMIX_DATA_DIR if set, else the `data` folder of the source
  /// tree this build came from. So a stored configuration names no machine's path unless one
  /// was given, and works from any working directory. A given path is used as is (relative to
  /// the working directory); the old default "data" falls back to the default lookup when no
  /// ./data folder exists.
  std::string dir;
  std::string eval_split = "valid";  ///< "valid" or "test" (enwik8/text8 only)
  /// "bytes" (vocab_size 256) or the path of a SentencePiece model (data/tokenizer.h), whose
  /// piece count must equal model.vocab_size. Training stores the model in the checkpoint.
  std::string tokenizer = "bytes";
  /// A classification task (data/tasks.h: listops, text, retrieval, image, pathfinder,
  /// pathx) instead of language modelling on `source`; empty: language modelling.
  std::string task;
  int64_t task_seed = 0;  ///< data generation and splits, independent of train.seed
  /// Examples per split (0: the task's default; data/tasks.h says what a count means).
  int64_t train_examples = 0, valid_examples = 0, test_examples = 0;
  /// Task batches are padded to a multiple of this many positions (at most model.max_len),
  /// like Hugging Face's pad_to_multiple_of: a few distinct shapes instead of one per batch
  /// keeps the heap from fragmenting over a long run. Masks make the results independent
  /// of it. 1 = pad to the longest example only.
  int64_t pad_to_multiple = 64;
  /// Pathfinder / Path-X difficulty (data/pathfinder.h): dashes per target path (0: the
  /// resolution's default, LRA's "hard" 14 at 32 x 32; LRA's easier sets use 6 and 9) and
  /// distractor paths (-1: the default, 5 at 32 x 32, 8 at 128 x 128). Other tasks refuse them.
  int64_t pathfinder_dashes = 0;
  int64_t pathfinder_distractors = -1;
  /// Pathfinder / Path-X image side in pixels (0: the task's, 32 and 128), in [16, 256]:
  /// the sequence is side^2 pixels, at most model.max_len. Dash lengths, gaps, marker size
  /// and clearance scale with it (data/pathfinder.h, pathfinder_options).
  int64_t pathfinder_resolution = 0;
  /// Retrieval only: negatives pair a president with one of this many predecessors or
  /// successors on each side (data/text_tasks.h, negative_neighbours); -1: the default, 2;
  /// 0: any other president, so the era (a century apart on average) gives most pairs away.
  int64_t retrieval_negative_neighbours = -1;
  static constexpr int64_t kMaxPathfinderDashes = 20, kMaxPathfinderDistractors = 20;
  /// 43 presidents: beyond 42 on each side every other president is a candidate.
  static constexpr int64_t kMaxRetrievalNegativeNeighbours = 42;
};

struct TrainConfig {
  int64_t batch_size = 32;          ///< sequences per step
  int64_t max_steps = 2000;         ///< optimizer steps
  double lr = 2e-3;                 ///< peak learning rate
  double min_lr_ratio = 0.1;        ///< final lr = lr * min_lr_ratio
  int64_t warmup_steps = 100;       ///< linear warm-up from 0
  std::string schedule = "cosine";  ///< decay after warm-up: cosine | linear | constant
  /// Steps over which the schedule decays (nanoGPT's lr_decay_iters): after it the rate stays
  /// at lr * min_lr_ratio. 0 = train.max_steps; a run stores the value it started with, so a
  /// resume with a larger --max-steps keeps the schedule unless this key is set explicitly.
  int64_t decay_steps = 0;
  double weight_decay = 0.1;        ///< AdamW decoupled decay, on weight matrices only
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;             ///< max global gradient L2 norm (0 = off)
  int64_t eval_interval = 250;        ///< steps between evaluations (0 = only at the end)
  int64_t eval_max_bytes = 262144;    ///< held-out tokens (bytes for byte-level models) scored
                                      ///< at periodic evaluations (0 = all);
                                      ///< the final evaluation always scores the whole split
  int64_t checkpoint_interval = 250;  ///< steps between checkpoints (0 = only at the end)
  int64_t log_interval = 10;          ///< steps between training metrics lines
  int64_t seed = 1337;                ///< model init, batch order, sampling
  int64_t threads = 0;                ///< intra-op threads (0 = all hardware threads)
  /// A non-finite loss or gradient: "stop" (an error naming the step and the parameter) or
  /// "skip" (no update for that step; training goes on).
  std::string nonfinite = "stop";
  /// Compute precision: "fp32", or "bf16" for mixed precision (bfloat16 matrix products and
  /// activations, float32 master weights, optimizer state, statistics and loss;
  /// include/seqmix/nn/precision.h). Stored with the run: eval and generate use it unless
  /// told otherwise.
  std::string precision = "fp32";
  /// The device the run computes on: "cpu", "cuda" (cuda:0) or "cuda:N" (util/device.h).
  /// Checkpoints hold CPU tensors whatever it is, so a run may resume on another device
  /// (the key may change on resume). With data-parallel workers, "cuda" gives each its own
  /// GPU (cuda:LOCAL_RANK) and NCCL carries the gradients.
  std::string device = "cpu";
};

struct RunConfig {
  models::ModelConfig model;
  DataConfig data;
  TrainConfig train;

  /// The whole configuration as TOML (what --dump-config prints and checkpoints store).
  std::string to_toml() const;
  /// Parses a configuration written by to_toml (every key present, except keys added after
  /// the first release, which default; old flat mixer keys are mapped, with a note). A key
  /// this version does not know (a hand edit, a newer seqmix) is an error naming it.
  /// @throws std::runtime_error naming `origin` and the bad key.
  static RunConfig from_toml(const std::string& text, const std::string& origin);
  /// Checks every key of every section, independently of the machine: sizes and counts in
  /// range, floating-point values finite (NaN and infinities are rejected) and in range, names
  /// known, model and data consistent: a task's example counts at most 10^8 per split (and
  /// the task's own limits: ListOps's token total, Fashion-MNIST's 60000 training images), a
  /// language model (data.task empty) causal.
  /// @throws std::invalid_argument "<section.key>: must be <what>, got <value>" for the
  ///         first invalid key.
  void validate() const;

  /// A lower bound on the memory one training step needs, bytes (computed in double, so any
  /// sizes give a finite answer instead of overflowing).
  struct MemoryEstimate {
    double parameters = 0;  ///< model.num_parameters_approx() x 4 bytes x 4: fp32 weights,
                            ///< gradients and AdamW's two moments
    double activations = 0;  ///< tensors one forward + backward keeps (see the .cpp)
    double total() const { return parameters + activations; }
  };
  MemoryEstimate estimate_training_memory() const;

  /// Checks the request against this machine, before anything is allocated:
  ///   - train.threads at most 4x the hardware threads (std::thread::hardware_concurrency);
  ///   - training: train.device available here (util::require_device);
  ///   - training: estimate_training_memory().total() at most the physical memory, and a
  ///     generated task's examples (data.*_examples x the task's max_len x 4 bytes) too;
  ///     otherwise (evaluating or generating from a stored configuration) the fp32 weights,
  ///     model.num_parameters_approx() x 4 bytes.
  /// resolve_config calls it for training (train, compare, resume); a command that loads a
  /// stored configuration to evaluate or generate can call check_resources(false) before
  /// building the model.
  /// @throws std::invalid_argument naming the keys, the request and the machine's
  ///         figure.
  void check_resources(bool training = true) const;
  /// Keys whose values differ, as "section.key: this vs other" (empty if equal).
  std::vector<std::string> diff(const RunConfig& other) const;
};

/// Every key that has a command-line flag, with the flag: ("train.lr", "--lr"), ... Errors
/// name keys alone ("train.lr: must be ..."); the command line adds the flag it knows the
/// key by.
std::vector<std::pair<std::string, std::string>> key_flags();

/// The check every TOML text seqmix parses gets first (config files, overrides, the
/// configuration inside a checkpoint or export, seqmix.build(config=...)): at most 1 MiB, and
/// nested at most 32 levels, counting each [ or { and each dot of a key outside strings and
/// comments (a real configuration nests 2). toml++ parses and frees nested values
/// recursively, so a crafted 100 KB header 50,000 levels deep would overflow the stack.
/// @throws std::runtime_error "<origin>: TOML nested 33+ levels deep at line 1; a
///         configuration nests at most 32 ..." or "<origin>: N bytes of TOML; ... at most 1 MiB".
void check_toml_text(std::string_view text, const std::string& origin);

/// One override of a configuration key, its value already of the key's type. Built either
/// from a typed value, or from the text "section.key=value" (implicitly, so a list of
/// strings is a list of overrides), whose value is TOML (a string may be given bare):
/// "train.lr=1e-3", "model.aib.weights=exp", "model.mixers=['aib', 'attention']".
struct Override {
  /// Parses "section.key=value" into the key's type: an integer where an integer is
  /// expected, a number (an integer is one) where a number is, true/false, a string, an
  /// array of strings.
  /// @throws std::runtime_error "override '<text>': ..." for a text not of that form, a line
  ///         break or NUL byte in the value, an unknown section or key (listing the known
  ///         ones), a value of another type, or a number out of the range of its type.
  Override(const std::string& text);  // NOLINT(google-explicit-constructor): see above
  Override(const char* text) : Override(std::string(text)) {}  // NOLINT
  /// `value` for `key` ("train.lr"); an integer given for a number is converted.
  /// @param origin  how messages name where the value came from ("--lr"); "" = the key.
  /// @throws std::runtime_error for an unknown key or a value of another type, as above.
  Override(std::string key, util::FieldValue value, std::string origin = "");

  std::string key;          ///< "section.key", e.g. "train.lr"
  util::FieldValue value;   ///< of the key's type
  std::string origin;       ///< for messages, e.g. "override 'train.lr=1e-3'" or "--lr"

  /// The same key and value (wherever they came from).
  bool operator==(const Override& o) const { return key == o.key && value == o.value; }
};

/// Resolves a run configuration (see file comment), then validate() and check_resources().
/// @param config_path  TOML file or empty: a regular file (a FIFO or device is refused without
///                     blocking, as data files are) of at most 1 MiB.
/// @param overrides    applied in order after the file; model.preset, model.size and
///                     data.task among them choose the preset the configuration starts from.
/// A model.mixers given by the file or an override may have at most model.n_layers entries
/// (a preset's pattern is used as is). An empty data.dir with SEQMIX_DATA_DIR set but empty
/// is an error naming the variable.
/// @throws std::runtime_error naming the file, key or override that is wrong, or the keys of a
///         request this machine cannot meet.
/// @param base         when given (resuming a run), the starting point instead of a preset.
RunConfig resolve_config(const std::string& config_path, const std::vector<Override>& overrides,
                         const RunConfig* base = nullptr);

}  // namespace seqmix::train
