#pragma once
/// @file checkpoint.h
/// Checkpoints: one file holding the model weights, the optimizer state, the step, the run's
/// wall time, the CPU RNG state, the resolved configuration (TOML) and the tokenizer (SentencePiece models are
/// stored whole, so a checkpoint decodes its own tokens wherever it is moved). Written to `<path>.tmp` and renamed over
/// `path`, so an interrupted write never replaces a good checkpoint.
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>

#include <string>

#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"

namespace seqmix::train {

/// What a run trained on, stored in its checkpoints so a resume can tell that the data
/// changed: a hash of every training and held-out token (or task example) and their sizes.
struct DataFingerprint {
  std::string hash;   ///< 16 hex digits; empty when unknown (checkpoints written before it)
  std::string sizes;  ///< "90000 train and 10000 held-out bytes"
};

/// Writes the configuration, `step`, the weights, the optimizer and RNG state (if `optimizer`
/// is given), the tokenizer (unless bytes) and `train_seconds`, the run's wall time so far
/// (a resumed run continues counting from it). Tensors are written as CPU tensors whatever
/// device the model and optimizer are on, so any machine can load the file.
/// @throws std::runtime_error naming the path if it cannot be written (the previous file, if
///         any, is left as it was).
void save_checkpoint(const std::string& path, models::SequenceModel& model,
                     torch::optim::Optimizer* optimizer, const RunConfig& config, int64_t step,
                     const data::Tokenizer& tokenizer = data::Tokenizer::bytes(),
                     double train_seconds = 0, const DataFingerprint& data = {});

/// Reads only the configuration stored in a checkpoint.
/// @throws std::runtime_error naming the path if it is missing, not a seqmix checkpoint, or
///         corrupt.
RunConfig read_checkpoint_config(const std::string& path);

/// The tokenizer stored in a checkpoint (bytes for byte-level runs).
/// @throws std::runtime_error naming the path if the checkpoint is unreadable, or its
///         configuration names a SentencePiece model but it holds none or a corrupt one.
data::Tokenizer read_checkpoint_tokenizer(const std::string& path);

/// Loads weights (and, if `optimizer` is given, the optimizer state and the RNG state) into a
/// model built from read_checkpoint_config(path), on whatever device the model is (the file's
/// CPU tensors are moved there, as torch.load's map_location does; the optimizer's state
/// follows its parameters). Returns the step stored; if
/// `train_seconds` is given, sets it to the run's wall time stored with it (0 for checkpoints
/// written before seqmix recorded it).
/// Loading is exact: every tensor stored for the model is one of its parameters or buffers
/// and every one of those is stored.
/// @throws std::runtime_error naming the path and the mismatch: a stored tensor the model does
///         not have ("holds tensor 'blocks.1.mixer.qkv.weight' that a model with this
///         configuration does not have"), a parameter or buffer it lacks ("lacks parameter
///         'Y' that a model with this configuration has"), a parameter or buffer whose dtype or
///         shape is not the model's, a parameter holding NaN or infinity ("holds non-finite
///         values in parameter 'Y'"), optimizer moments that do not match their parameter or
///         are not finite, or a corrupt archive (see CheckpointFile). What LibTorch throws while
///         reading is not passed on: "is corrupt (LibTorch cannot load its optimizer state)".
int64_t load_checkpoint(const std::string& path, models::SequenceModel& model,
                        torch::optim::Optimizer* optimizer, double* train_seconds = nullptr);

/// Moves the per-parameter state of `optimizer` (AdamW's moments) to `device`. Module::to
/// moves parameters but not what an optimizer holds for them.
void move_optimizer_state(torch::optim::Optimizer& optimizer, const c10::Device& device);

/// A checkpoint opened once: its archive is verified (zip structure, every entry's CRC-32,
/// the archive format version), its contents are checked before LibTorch reads them (every
/// pickle well formed, every storage's `data/N` record exactly as large as its element count
/// needs, every tensor's sizes, strides and offset inside its storage, the TorchScript code
/// plain declarations), then parsed in the constructor, and config(), tokenizer() and load() read from that. The
/// free functions above each open the file anew; a caller that needs more than one part
/// (resume, eval, generate) opens it once here.
class CheckpointFile {
 public:
  /// @throws std::runtime_error naming the path if it is missing, not a seqmix checkpoint,
  ///         of an archive format version LibTorch cannot read ("checkpoint 'X' has
  ///         archive format version 99; this seqmix reads versions 1..10"), corrupt
  ///         ("checkpoint 'X' is corrupt: tensor 'model/pos_emb' needs 8192 bytes but its
  ///         storage 'archive/data/0' holds 100"), or holds an invalid configuration.
  explicit CheckpointFile(std::string path);
  const RunConfig& config() const { return config_; }
  /// The file's path as given.
  const std::string& path() const { return path_; }
  /// The data the run trained on (empty hash for a checkpoint that does not record it).
  const DataFingerprint& data_fingerprint() const { return data_; }
  /// As read_checkpoint_tokenizer().
  data::Tokenizer tokenizer();
  /// As load_checkpoint().
  int64_t load(models::SequenceModel& model, torch::optim::Optimizer* optimizer,
               double* train_seconds = nullptr);
  /// Frees the parsed archive (a copy of every tensor in the file) once its state is loaded;
  /// config() stays valid, tokenizer() and load() then throw std::logic_error.
  void close();

 private:
  std::string path_;
  torch::serialize::InputArchive archive_;
  RunConfig config_;
  DataFingerprint data_;
  bool closed_ = false;
  void check_open(const char* what) const;
};

/// What a path a user gave as a model is, judged from its file type and zip listing alone:
/// nothing is unpickled and a FIFO or device is never opened. The CLI's commands and
/// seqmix.load decide with it what to do, or which command a file belongs to.
enum class ModelFileKind {
  kMissing,     ///< nothing at the path
  kRunFolder,   ///< a folder holding checkpoint.pt or config.toml
  kFolder,      ///< any other folder
  kSpecial,     ///< a FIFO, device or socket
  kCheckpoint,  ///< a LibTorch archive (a run's checkpoint.pt): its zip holds constants.pkl
  kExport,      ///< a `seqmix export` file: a torch.save pickle naming "seqmix.export"
  kOther,       ///< any other file (a state dict from torch.save, or not a model at all)
};
ModelFileKind model_file_kind(const std::string& path);

/// Resolves "a run folder or a checkpoint file" to the checkpoint file.
/// @throws std::runtime_error if neither exists, naming what the path is instead (a FIFO, a
///         seqmix export and the command that takes it, ...).
std::string find_checkpoint(const std::string& run_or_file);

}  // namespace seqmix::train
