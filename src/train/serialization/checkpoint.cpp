#include "seqmix/train/serialization/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>
#include <caffe2/serialize/versions.h>
#include <zip.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "archive_check.h"
#include "seqmix/util/device.h"
#include "seqmix/util/files.h"
#include "seqmix/util/paths.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {

// The archive checks (archive_check.h).
using namespace detail;

constexpr const char* kFormat = "seqmix-checkpoint-1";

// The first non-empty line of a message (LibTorch's TorchScript errors start with a newline).
std::string first_line(const std::string& s) {
  size_t b = 0;
  while (b < s.size() && (s[b] == '\n' || s[b] == ' ')) ++b;
  const auto nl = s.find('\n', b);
  return nl == std::string::npos ? s.substr(b) : s.substr(b, nl - b);
}

// A part of the checkpoint that LibTorch could not load into the model or optimizer.
std::runtime_error corrupt_checkpoint_state(const std::string& path, const std::string& what) {
  return std::runtime_error("checkpoint '" + path + "' is corrupt (LibTorch cannot load its " +
                            what + ")");
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  if (!fs::is_regular_file(path))
    throw std::runtime_error("checkpoint '" + path + "' does not exist");
  const ZipEntries zip = verify_archive(path);
  verify_version(path, zip);
  verify_contents(path, zip);
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path);
  } catch (const std::exception&) {
    // c10::Error, or torch::jit::ErrorReport when a corrupt archive names unknown types
    // (found by fuzz/fuzz_checkpoint). Its text (an "[enforce fail at ...]", a TorchScript
    // source excerpt) says nothing a user can act on: our own wording only.
    throw corrupt_checkpoint(path, "LibTorch cannot read its archive");
  }
  c10::IValue format;
  if (!ar.try_read("format", format) || !format.isString() || format.toStringRef() != kFormat)
    throw std::runtime_error("checkpoint '" + path + "' is not a " + kFormat + " file");
  // Again on what LibTorch made of it: every tensor inside its storage.
  for (const std::string& key : ar.keys()) {
    c10::IValue v;
    if (!ar.try_read(key, v)) continue;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    collect_tensors(v, "", tensors);
    for (const auto& [name, t] : tensors) check_loaded_tensor(path, name.empty() ? key : key + "/" + name, t);
  }
  return ar;
}
// Module::save with every tensor copied to the CPU first (a no-op for CPU tensors): the same
// archive layout, readable where no GPU is.
void save_on_cpu(const torch::nn::Module& module, torch::serialize::OutputArchive& ar) {
  for (const auto& p : module.named_parameters(/*recurse=*/false))
    ar.write(p.key(), p.value().to(at::kCPU));
  for (const auto& b : module.named_buffers(/*recurse=*/false))
    ar.write(b.key(), b.value().to(at::kCPU), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::OutputArchive child_ar(ar.compilation_unit());
    save_on_cpu(*child.value(), child_ar);
    ar.write(child.key(), child_ar);
  }
}

// The device of the optimizer's first parameter (CPU if it has none).
c10::Device optimizer_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) return p.device();
  return c10::Device(c10::kCPU);
}
}  // namespace

void move_optimizer_state(torch::optim::Optimizer& optimizer, const c10::Device& device) {
  for (auto& entry : optimizer.state()) {
    auto* s = dynamic_cast<torch::optim::AdamWParamState*>(entry.second.get());
    if (!s) continue;
    auto move = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
    s->exp_avg(move(s->exp_avg()));
    s->exp_avg_sq(move(s->exp_avg_sq()));
    s->max_exp_avg_sq(move(s->max_exp_avg_sq()));
  }
}

void save_checkpoint(const std::string& path, models::SequenceModel& model,
                     torch::optim::Optimizer* optimizer, const RunConfig& config, int64_t step,
                     const data::Tokenizer& tokenizer, double train_seconds,
                     const DataFingerprint& data) {
  torch::serialize::OutputArchive ar;
  ar.write("format", c10::IValue(std::string(kFormat)));
  ar.write("config", c10::IValue(config.to_toml()));
  ar.write("step", c10::IValue(step));
  ar.write("train_seconds", c10::IValue(train_seconds));
  if (!data.hash.empty()) {
    ar.write("data_hash", c10::IValue(data.hash));
    ar.write("data_sizes", c10::IValue(data.sizes));
  }
  if (!tokenizer.is_bytes()) {
    // As raw bytes: a serialized protobuf is not valid UTF-8 text.
    const std::string& proto = tokenizer.serialized();
    at::Tensor bytes = at::empty({static_cast<int64_t>(proto.size())}, at::kByte);
    std::memcpy(bytes.data_ptr<uint8_t>(), proto.data(), proto.size());
    ar.write("tokenizer", bytes);
  }
  torch::serialize::OutputArchive model_ar;
  save_on_cpu(*model, model_ar);
  ar.write("model", model_ar);
  if (optimizer) {
    torch::serialize::OutputArchive opt_ar;
    // The optimizer writes its state as it holds it: on a GPU, a CPU copy for the file's
    // sake, then back (checkpoints are rare; the copy costs one transfer of the moments).
    const c10::Device device = optimizer_device(*optimizer);
    if (!device.is_cpu()) move_optimizer_state(*optimizer, at::kCPU);
    try {
      optimizer->save(opt_ar);
    } catch (...) {
      if (!device.is_cpu()) move_optimizer_state(*optimizer, device);
      throw;
    }
    if (!device.is_cpu()) move_optimizer_state(*optimizer, device);
    ar.write("optimizer", opt_ar);
    ar.write("rng", at::detail::getDefaultCPUGenerator().get_state());
    // Dropout on a GPU draws from that GPU's generator (Philox: seed and offset), so a
    // resumed CUDA run repeats the uninterrupted one only with that state restored too.
    if (device.is_cuda())
      ar.write("rng_cuda", at::globalContext().defaultGenerator(device).get_state());
  }
  // Serialized in memory first: LibTorch's file writer throws again from its destructor
  // when a write fails (a full disk), which ends the process instead of reporting it.
  std::string bytes;
  try {
    ar.save_to([&bytes](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  } catch (const c10::Error& e) {
    throw std::runtime_error("cannot serialize checkpoint '" + path +
                             "': " + first_line(e.what_without_backtrace()));
  }
  try {
    const fs::path dir = fs::path(path).parent_path();
    if (!dir.empty()) fs::create_directories(dir);
    util::write_file_atomic(path, bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write checkpoint: " + first_line(e.what()) +
                             " (the previous checkpoint, if any, is intact)");
  }
}

namespace {
RunConfig config_in(torch::serialize::InputArchive& ar, const std::string& path) {
  c10::IValue cfg;
  if (!ar.try_read("config", cfg) || !cfg.isString())
    throw std::runtime_error("checkpoint '" + path + "' holds no configuration");
  try {
    return RunConfig::from_toml(cfg.toStringRef(), "configuration in checkpoint '" + path + "'");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("checkpoint '" + path +
                             "' holds an invalid configuration: " + e.what());
  }
}
}  // namespace

CheckpointFile::CheckpointFile(std::string path)
    : path_(std::move(path)), archive_(open_archive(path_)), config_(config_in(archive_, path_)) {
  c10::IValue hash, sizes;
  if (archive_.try_read("data_hash", hash) && hash.isString() &&
      archive_.try_read("data_sizes", sizes) && sizes.isString()) {
    // Shown in messages: printable and short, whatever a crafted file holds.
    data_.hash = util::printable_text(hash.toStringRef().substr(0, 64));
    data_.sizes = util::printable_text(sizes.toStringRef().substr(0, 200));
  }
}

RunConfig read_checkpoint_config(const std::string& path) { return CheckpointFile(path).config(); }

data::Tokenizer read_checkpoint_tokenizer(const std::string& path) {
  return CheckpointFile(path).tokenizer();
}

int64_t load_checkpoint(const std::string& path, models::SequenceModel& model,
                        torch::optim::Optimizer* optimizer, double* train_seconds) {
  return CheckpointFile(path).load(model, optimizer, train_seconds);
}

void CheckpointFile::close() {
  archive_ = torch::serialize::InputArchive();
  closed_ = true;
}

void CheckpointFile::check_open(const char* what) const {
  if (closed_)
    throw std::logic_error(std::string("CheckpointFile::") + what + ": checkpoint '" + path_ +
                           "' was closed after its state was loaded");
}

data::Tokenizer CheckpointFile::tokenizer() {
  check_open("tokenizer");
  if (config_.data.tokenizer == "bytes") return data::Tokenizer::bytes();
  at::Tensor bytes;
  if (!archive_.try_read("tokenizer", bytes) || bytes.scalar_type() != at::kByte || bytes.dim() != 1)
    throw std::runtime_error("checkpoint '" + path_ + "' was trained with tokenizer '" +
                             config_.data.tokenizer + "' but holds no tokenizer model");
  bytes = bytes.contiguous();
  const std::string proto(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                          static_cast<size_t>(bytes.numel()));
  auto tok = data::Tokenizer::from_serialized(proto, "the tokenizer in checkpoint '" + path_ + "'");
  if (tok.vocab_size() != config_.model.vocab_size)
    throw std::runtime_error("checkpoint '" + path_ + "': its tokenizer has " +
                             std::to_string(tok.vocab_size()) + " pieces but model.vocab_size is " +
                             std::to_string(config_.model.vocab_size));
  return tok;
}

namespace {
// The checkpoint's weights against the model's own, before loading them: the checkpoint holds
// exactly the model's parameters and buffers (Module::load reads the ones the model has and
// ignores any others, so a configuration edited to fewer layers would silently drop the
// rest), each with the model's dtype and shape, and parameters hold only finite values.
void check_model_tensors(const std::string& path, const c10::IValue& stored_model,
                         models::SequenceModel& model) {
  std::vector<std::pair<std::string, at::Tensor>> stored;
  collect_tensors(stored_model, "", stored);
  std::unordered_map<std::string, at::Tensor> by_name(stored.begin(), stored.end());
  std::unordered_map<std::string, const char*> mine;
  for (const auto& p : model->named_parameters()) mine.emplace(p.key(), "parameter");
  for (const auto& b : model->named_buffers()) mine.emplace(b.key(), "buffer");
  for (const auto& [key, t] : stored)
    if (!mine.count(key))
      throw std::runtime_error("checkpoint '" + path + "' holds tensor '" + key +
                               "' that a model with this configuration does not have");
  for (const auto& p : model->named_parameters())
    if (!by_name.count(p.key()))
      throw std::runtime_error("checkpoint '" + path + "' lacks parameter '" + p.key() +
                               "' that a model with this configuration has");
  for (const auto& b : model->named_buffers())
    if (!by_name.count(b.key()))
      throw std::runtime_error("checkpoint '" + path + "' lacks buffer '" + b.key() +
                               "' that a model with this configuration has");
  auto check = [&](const std::string& key, const at::Tensor& mine, const char* what) {
    const at::Tensor& t = by_name.at(key);
    if (!t.defined())
      throw corrupt_contents(path, std::string(what) + " 'model/" + key + "' holds no tensor");
    if (t.scalar_type() != mine.scalar_type())
      throw corrupt_contents(path, std::string(what) + " 'model/" + key + "' holds " +
                                       c10::toString(t.scalar_type()) + " values but the model's " +
                                       what + " holds " + c10::toString(mine.scalar_type()));
    if (t.sizes() != mine.sizes())
      throw std::runtime_error("checkpoint '" + path + "' does not fit this model: " + what +
                               " '" + key + "' has shape " + c10::str(t.sizes()) +
                               " in the checkpoint but " + c10::str(mine.sizes()) +
                               " in the model");
    if (!finite_values(t))
      throw std::runtime_error("checkpoint '" + path + "' holds non-finite values in " + what +
                               " '" + key + "'");
  };
  for (const auto& p : model->named_parameters()) check(p.key(), p.value(), "parameter");
  for (const auto& b : model->named_buffers()) check(b.key(), b.value(), "buffer");
}

// The loaded AdamW moments against their parameters: same shape and dtype, finite.
void check_optimizer_state(const std::string& path, torch::optim::Optimizer& optimizer,
                           models::SequenceModel& model) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : model->named_parameters())
    names[p.value().unsafeGetTensorImpl()] = p.key();
  for (auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get());
      if (!s) continue;
      const auto n = names.find(p.unsafeGetTensorImpl());
      const std::string name = n == names.end() ? "?" : n->second;
      if (s->step() < 0)
        throw corrupt_contents(path, "the optimizer state of parameter '" + name +
                                         "' has step " + std::to_string(s->step()));
      for (const auto& [what, t] : {std::pair<const char*, at::Tensor>{"exp_avg", s->exp_avg()},
                                    {"exp_avg_sq", s->exp_avg_sq()},
                                    {"max_exp_avg_sq", s->max_exp_avg_sq()}}) {
        if (!t.defined()) continue;
        if (t.sizes() != p.sizes() || t.scalar_type() != p.scalar_type())
          throw corrupt_contents(path, std::string("optimizer state '") + what +
                                           "' of parameter '" + name + "' is " +
                                           c10::toString(t.scalar_type()) + c10::str(t.sizes()) +
                                           " but the parameter is " +
                                           c10::toString(p.scalar_type()) + c10::str(p.sizes()));
        if (!finite_values(t))
          throw std::runtime_error("checkpoint '" + path +
                                   "' holds non-finite values in the optimizer state '" + what +
                                   "' of parameter '" + name + "'");
      }
    }
  }
}
}  // namespace

int64_t CheckpointFile::load(models::SequenceModel& model, torch::optim::Optimizer* optimizer,
                            double* train_seconds) {
  check_open("load");
  c10::IValue step;
  if (!archive_.try_read("step", step) || !step.isInt())
    throw std::runtime_error("checkpoint '" + path_ + "' holds no step");
  if (step.toInt() < 0)
    throw corrupt_contents(path_, "its step is " + std::to_string(step.toInt()));
  if (train_seconds) {
    c10::IValue s;
    *train_seconds = archive_.try_read("train_seconds", s) && s.isDouble() ? s.toDouble() : 0.0;
    if (!std::isfinite(*train_seconds) || *train_seconds < 0) *train_seconds = 0.0;
  }
  c10::IValue stored_model;
  if (!archive_.try_read("model", stored_model) || !stored_model.isObject())
    throw std::runtime_error("checkpoint '" + path_ + "' holds no model weights");
  check_model_tensors(path_, stored_model, model);
  // LibTorch's reader gives a parameter on another device than the stored tensor the stored
  // tensor's data, so the file's CPU tensors go into the model on the CPU, then the model (and
  // the optimizer's state) back to its device: torch.load's map_location.
  const c10::Device device = util::module_device(*model);
  if (!device.is_cpu()) {
    model->to(at::kCPU);
    if (optimizer) move_optimizer_state(*optimizer, at::kCPU);
  }
  // (A load that fails leaves a model to be discarded, wherever it is.)
  // Runs one of LibTorch's readers; what it throws (an "[enforce fail at ...]", "No such
  // serialized tensor", a state dict's group sizes) is replaced by our own wording.
  auto libtorch = [&](const char* what, const std::function<void()>& read) {
    try {
      read();
    } catch (const std::exception&) {  // c10::Error, torch::jit::ErrorReport, ...
      throw corrupt_checkpoint_state(path_, what);
    }
  };
  // Module::load adopts whatever shape it reads; a silent resize would hide an incompatible
  // checkpoint, so compare against the shapes the config gave the model (as checked above).
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& p : model->named_parameters())
    expected.emplace_back(p.key(), p.value().sizes().vec());
  libtorch("model weights", [&] {
    torch::serialize::InputArchive model_ar;
    archive_.read("model", model_ar);
    model->load(model_ar);
  });
  auto params = model->named_parameters();
  for (const auto& [key, shape] : expected) {
    const at::Tensor& t = params[key];
    if (t.sizes().vec() != shape)
      throw std::runtime_error("checkpoint '" + path_ + "' does not fit this model: parameter '" +
                               key + "' has shape " + c10::str(t.sizes()) +
                               " in the checkpoint but " + c10::str(at::IntArrayRef(shape)) +
                               " in the model");
  }
  if (optimizer) {
    torch::serialize::InputArchive opt_ar;
    at::Tensor rng;
    if (!archive_.try_read("optimizer", opt_ar) || !archive_.try_read("rng", rng))
      throw std::runtime_error("checkpoint '" + path_ +
                               "' holds no optimizer state: it cannot be resumed");
    libtorch("optimizer state", [&] { optimizer->load(opt_ar); });
    libtorch("RNG state", [&] {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(rng);
    });
    // A checkpoint written on a GPU carries that GPU's generator; it is restored when the
    // run resumes on a GPU (any index: the state is a seed and an offset). One written on
    // the CPU has none, and a CPU run ignores it: the CPU generator alone drives its draws.
    at::Tensor rng_cuda;
    if (device.is_cuda() && archive_.try_read("rng_cuda", rng_cuda))
      libtorch("CUDA RNG state", [&] {
        at::Generator gen = at::globalContext().defaultGenerator(device);
        gen.set_state(rng_cuda);
      });
  }
  if (optimizer) check_optimizer_state(path_, *optimizer, model);
  if (!device.is_cpu()) {
    model->to(device);
    if (optimizer) move_optimizer_state(*optimizer, device);
  }
  return step.toInt();
}

ModelFileKind model_file_kind(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // stat only
  if (ec || !fs::exists(st)) return ModelFileKind::kMissing;
  if (fs::is_directory(st))
    return util::run_files_in(path).empty() ? ModelFileKind::kFolder : ModelFileKind::kRunFolder;
  if (!fs::is_regular_file(st)) return ModelFileKind::kSpecial;
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &code);
  if (!z) return ModelFileKind::kOther;
  std::unique_ptr<zip_t, void (*)(zip_t*)> guard(z, zip_discard);
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* cname = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    const std::string name = cname ? cname : "";
    const auto slash = name.find('/');
    const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
    if (base == "constants.pkl") return ModelFileKind::kCheckpoint;
    if (base != "data.pkl") continue;
    // An export's data.pkl is a few KB: its dict keys name the format.
    zip_stat_t zs;
    if (zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &zs) != 0 || zs.size > (1u << 24))
      continue;
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    if (!f) continue;
    std::string text(static_cast<size_t>(zs.size), '\0');
    const zip_int64_t got = zip_fread(f, text.data(), text.size());
    zip_fclose(f);
    if (got > 0 && text.find("seqmix.export") != std::string::npos) return ModelFileKind::kExport;
  }
  return ModelFileKind::kOther;
}

std::string find_checkpoint(const std::string& run_or_file) {
  switch (model_file_kind(run_or_file)) {
    case ModelFileKind::kRunFolder:
    case ModelFileKind::kFolder: {
      const fs::path p = fs::path(run_or_file) / "checkpoint.pt";
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return p.string();
      // Say what is there: a folder, FIFO or link loop is not "no checkpoint".
      const fs::file_status link = fs::symlink_status(p, ec);
      if (ec == std::errc::permission_denied)
        throw std::runtime_error("run folder '" + run_or_file +
                                 "': cannot read its checkpoint.pt (permission denied)");
      if (!fs::exists(link))
        throw std::runtime_error("run folder '" + run_or_file + "' has no checkpoint.pt");
      const char* kind = util::file_type_description(p.string());
      throw std::runtime_error("run folder '" + run_or_file + "': its checkpoint.pt is " +
                               (kind ? std::string(kind) : std::string("unreadable")) +
                               ", not a regular file");
    }
    case ModelFileKind::kMissing:
      throw std::runtime_error("'" + run_or_file + "' does not exist (expected a run folder or "
                               "a checkpoint file)");
    case ModelFileKind::kSpecial:
      throw std::runtime_error("'" + run_or_file + "' is " +
                               util::file_type_description(run_or_file) +
                               ", not a run folder or checkpoint file");
    case ModelFileKind::kExport:
      throw std::runtime_error("'" + run_or_file + "' is a seqmix export, not a checkpoint: "
                               "make a run folder of it with `seqmix import " + run_or_file +
                               " --out DIR` (or load it in Python with seqmix.load)");
    case ModelFileKind::kCheckpoint:
    case ModelFileKind::kOther:
      break;  // a damaged checkpoint is reported by its reader, with what is wrong
  }
  return run_or_file;
}

namespace detail {

void verify_plain_pickle(const std::string& path, const std::string& noun,
                         const std::string& not_a) {
  switch (model_file_kind(path)) {
    case ModelFileKind::kMissing:
      throw std::runtime_error(noun + " '" + path + "' does not exist");
    case ModelFileKind::kRunFolder:
      throw std::runtime_error("'" + path + "' is a run folder: eval, generate, export and "
                               "train --resume take it as it is; import takes a file that "
                               "`seqmix export` or torch.save wrote");
    case ModelFileKind::kFolder:
    case ModelFileKind::kSpecial:
      throw std::runtime_error(noun + " '" + path + "' is " + util::file_type_description(path) +
                               ", not a file");
    case ModelFileKind::kCheckpoint:
      throw std::runtime_error("'" + path + "' is a seqmix checkpoint, not " + not_a +
                               ": eval, generate and export take it as it is (or its run "
                               "folder); import takes a file that `seqmix export` or "
                               "torch.save wrote");
    case ModelFileKind::kExport:
    case ModelFileKind::kOther:
      break;
  }
  const ZipEntries zip = verify_archive(path, noun, not_a);
  verify_version(path, zip, noun);
  verify_plain_contents(path, zip, noun);
}


}  // namespace detail

}  // namespace seqmix::train
