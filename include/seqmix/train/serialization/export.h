#pragma once
/// @file export.h
/// Moving models between seqmix and plain PyTorch, and writing a run folder from a model held
/// in memory (one trained from Python, or read from an export).
///
/// **Export file** (export_run): a file that Python's `torch.load(FILE)` opens without seqmix,
/// under its default weights_only=True (the pickle holds only dicts, lists, strings, numbers
/// and tensors, without the type tags torch::pickle_save adds, which that unpickler refuses),
/// in torch.save's archive layout: one dict
///
///     {"format": "seqmix.export",       # str
///      "version": 1,                    # int: this layout
///      "state_dict": {name: Tensor},    # model->named_parameters() then named_buffers(),
///                                       # the names PyTorch's state_dict() gives
///      "config": {"model": {..., "aib": {...}, ...}, "data": {...}, "train": {...}},
///                                       # the resolved RunConfig, RunConfig::to_toml() as
///                                       # nested dicts of str/int/float/bool/list
///      "tokenizer": "bytes" | Tensor,   # a SentencePiece model: its serialized ModelProto
///                                       # as a 1-D uint8 tensor (bytes(t.numpy()) in Python)
///      "seqmix_version": "0.1.0"}
///
/// **Bare state dict**: a file Python writes with `torch.save(dict(model.state_dict()), f)`:
/// a dict of tensors and nothing else, so its configuration must be given separately.
///
/// **Hugging Face folder** (export_run_hf, `seqmix export --format hf`): a folder that
/// Python's safetensors and transformers-style loaders read, and that Python's
/// `model.save_pretrained(dir)` writes too:
///   - `model.safetensors` (safetensors.h): every tensor of the state dict above, under the
///     same names, each in its own dtype (F32 parameters, I64 for BatchNorm's
///     num_batches_tracked), with "__metadata__" {"format": "pt"} (transformers refuses a
///     file without it);
///   - `config.json`:
///
///       {"model_type": "seqmix",
///        "architectures": ["SeqmixForCausalLM"],   # "SeqmixForSequenceClassification" for a
///                                                  # classifier (model.n_classes > 0)
///        "vocab_size": 256, "hidden_size": 128,    # model.vocab_size, model.d_model,
///        "num_hidden_layers": 4, "num_attention_heads": 4,   # model.n_layers, model.n_heads
///        "max_position_embeddings": 256,           # model.max_len
///        "tie_word_embeddings": false,             # seqmix ties inside its own model
///        "seqmix": {"format": 1,                   # this layout (kHfExportFormat)
///                   "version": "0.1.0",            # the seqmix that wrote it
///                   "tokenizer": "bytes" | "sentencepiece",
///                   "config": {"model": {...}, "data": {...}, "train": {...}}}}
///
///     where "config" is the export file's `config` as JSON (numbers written so that every
///     double reads back as the same double);
///   - `tokenizer.model`: the SentencePiece model (its serialized ModelProto), for a
///     SentencePiece run only.
///
/// Every file is checked before LibTorch reads it (zip structure, CRC-32 of every entry,
/// archive version, a pickle of plain dicts, lists and tensors only, every tensor inside its
/// storage): a corrupt, truncated or crafted file is an error naming it, never a crash.
///
/// Example (Python side of a round trip):
///   d = torch.load("wn.pt"); sd = d["state_dict"]; print(d["config"]["model"]["mixers"])
///   torch.save(dict(my_model.state_dict()), "sd.pt")   # then: seqmix import sd.pt ...
#include <cstdint>
#include <string>

#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/configuration/resolve.h"

namespace seqmix::train {

/// The "format" and "version" values of an export file.
inline constexpr const char* kExportFormat = "seqmix.export";
inline constexpr int64_t kExportVersion = 1;
/// The "seqmix"."format" of a Hugging Face folder's config.json.
inline constexpr int64_t kHfExportFormat = 1;

/// Writes a run folder for `model` (built from `config.model`) as train() leaves one:
/// checkpoint.pt (save_checkpoint: weights, `step`, the resolved configuration, the tokenizer,
/// and an optimizer and RNG state so that `seqmix train --out DIR --resume --max-steps N`
/// continues it), config.toml (config.to_toml()) and, for a SentencePiece tokenizer,
/// tokenizer.model. The optimizer is the one train() builds (make_optimizer in trainer.h);
/// its AdamW moments start fresh (zero) on resume, since the model's own are not known. The
/// RNG state stored is this process's current one. No metrics.jsonl is written (a resumed run
/// starts it).
///
/// The folder rules are train()'s (util/run_folder.h): `out_dir` is created if missing and
/// locked while it is written; a folder that already holds a run (checkpoint.pt, config.toml
/// or metrics.jsonl) is refused unless `overwrite`, which replaces that run (its
/// metrics.jsonl and tokenizer.model go with it); a non-empty folder that holds no run is
/// refused. Files are written under temporary names and renamed, and on an error nothing
/// written is left behind (nor the folder, if it was created here).
/// @throws std::invalid_argument if `config` is invalid (RunConfig::validate), `step` is
///         negative, or `model`'s parameters or buffers are not those a model built from
///         `config.model` has (names, shapes, dtypes) or not finite ("save_run: the model
///         given: parameter 'pos_emb' has shape [32, 64], a model of this configuration has
///         [128, 64]").
/// @throws std::runtime_error as check_tokenizer when `tokenizer` does not fit the
///         configuration.
/// @throws std::runtime_error naming the folder: it holds a run and `overwrite` is false
///         ("run folder 'X' already holds a run (checkpoint.pt, config.toml); replace it with
///         --overwrite"), it is not empty and holds no run, it exists and is not a folder,
///         another process holds its lock, or a file cannot be written.
void save_run(const std::string& out_dir, models::SequenceModel& model, const RunConfig& config,
              const data::Tokenizer& tokenizer, int64_t step, bool overwrite);

/// Writes the export file (see above) of `run_or_checkpoint` (a run folder or a checkpoint
/// file, read and verified as load_run does) to `out_file`: to `<out_file>.tmp`, then
/// renamed over it. Returns nothing; the file holds the model's parameters and buffers as
/// they are stored (float32 for seqmix's models).
/// @throws std::runtime_error as load_run for the run; "export: '<out_file>' exists; give
///         --overwrite to replace it" when it exists and `overwrite` is false; "export:
///         '<out_file>' is a run folder's checkpoint; ..." when it names a checkpoint.pt in a
///         run folder (or a run's own checkpoint file); naming the file when it is a folder or
///         cannot be written (no partial file is left).
void export_run(const std::string& run_or_checkpoint, const std::string& out_file,
                bool overwrite);

/// Writes the Hugging Face folder (see above) of `run_or_checkpoint` (read and verified as
/// load_run does) at `out_dir`, whole or not at all: the files are written and synced in a
/// new sibling folder `.<name>.export-XXXXXX`, which is then renamed to `out_dir` (a process
/// killed before that leaves only this hidden sibling). An absent or empty `out_dir` is
/// replaced; one that holds files only with `overwrite`, and only once the new folder is
/// complete (an atomic exchange where the file system has one), and only if it holds an
/// export: files only, among them config.json or model.safetensors. `overwrite` replaces what
/// an export writes (config.json, model.safetensors, tokenizer.model) and keeps every other
/// file a user put there (a README.md model card): each is carried into the new folder.
/// @throws std::runtime_error as load_run for the run; "export: folder '<out_dir>' exists
///         and is not empty; give `overwrite` to replace it"; naming `out_dir` when it is a
///         file, symbolic link, FIFO or device, a run's folder or inside one, a folder that
///         holds no export or holds more than files (with `overwrite`), the folder of the
///         checkpoint being exported, or names no folder ("." or "/"); naming the file that
///         cannot be written (nothing is left of the new folder).
void export_run_hf(const std::string& run_or_checkpoint, const std::string& out_dir,
                   bool overwrite);

/// Reads a Hugging Face folder `dir` (see above): its configuration and tokenizer from
/// config.json and tokenizer.model, its tensors from model.safetensors, loaded as strictly
/// as load_export loads an export (the same checks, messages naming
/// "export '<dir>/model.safetensors'" and the tensor). Fields that transformers reads
/// (vocab_size, hidden_size, ...; architectures) must agree with the configuration when
/// present. The model is returned in eval mode.
/// @throws std::runtime_error naming the folder or file: a run folder; config.json or
///         model.safetensors missing or not a regular file; config.json not JSON, its
///         model_type not "seqmix", no "seqmix" object, a seqmix.format above 1 ("written by
///         a newer seqmix"), a configuration value JSON cannot map to TOML, an invalid
///         configuration, a field that disagrees with it ("has hidden_size 64 but its
///         model.d_model is 128"), a tokenizer that is missing or does not fit, a
///         tokenizer.model beside a byte-level configuration; as
///         read_safetensors for a corrupt model.safetensors; as load_export for the tensors.
LoadedRun load_hf_export(const std::string& dir);

/// Copies `state` (name -> tensor) into `model` strictly, with the checks load_export makes
/// (below); `what` starts every message ("'x.pt'"). Nothing is copied unless every tensor
/// passes. The one loader of outside tensors: the CLI's import and seqmix.load of a bare
/// state dict both go through it.
/// @throws std::runtime_error as load_export for tensor mismatches, and "<what>: parameter
///         'W' holds values beyond the range of the model's Float (largest magnitude 1e+300,
///         the most Float holds is 3.40282e+38)" for a float64 value that float32 cannot hold.
void load_state_dict(models::SequenceModel& model,
                     const std::vector<std::pair<std::string, at::Tensor>>& state,
                     const std::string& what);

/// Reads `file`: a seqmix export (configuration and tokenizer from the file; `bare_config`
/// must be null), a Hugging Face folder (load_hf_export; `bare_config` must be null) or a
/// bare state dict (the configuration is resolve_run(*bare_config): preset,
/// config file, overrides and tokenizer as train takes them). Builds the model and loads the
/// tensors strictly: every parameter and buffer of the model present, no other names, each of
/// the model's shape; a float32 or float64 tensor is converted to the model's floating dtype
/// (other floating dtypes are refused), a non-floating one must have the model's dtype; every
/// floating value finite. The model is returned in eval mode; the configuration is checked
/// against this machine (RunConfig::check_resources(false)) before the model is built.
/// @throws std::runtime_error naming the file: missing, corrupt or neither kind ("export
///         'x.pt' is corrupt or not a seqmix export or state dict (zip: Not a zip archive)"),
///         a "format" other than "seqmix.export", a "version" above 1, a missing or
///         malformed entry; a bare state dict without `bare_config` ("export 'x.pt' holds no
///         configuration (a bare state dict): give it with --model/--size, --config or
///         --set"); `bare_config` given for a seqmix export; and tensor mismatches: "export
///         'x.pt': parameter 'blocks.0.mixer.w' has shape [9, 64], the model's is [8, 64]",
///         "export 'x.pt' lacks parameter 'head.weight' that a model with this configuration
///         has", "export 'x.pt' holds tensor 'foo' that a model with this configuration does
///         not have", "export 'x.pt': parameter 'W' holds Half values; seqmix reads float32 or
///         float64", "export 'x.pt' holds non-finite values in parameter 'W'".
/// @throws std::runtime_error / std::invalid_argument as resolve_run for `bare_config`, and
///         as RunConfig::from_toml for an export's invalid configuration.
LoadedRun load_export(const std::string& file, const RunRequest* bare_config);

}  // namespace seqmix::train
