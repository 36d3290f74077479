#include "seqmix/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>
#include <zip.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include "seqmix/util/files.h"

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "seqmix-checkpoint-1";

// The first non-empty line of a message (LibTorch's TorchScript errors start with a newline).
std::string first_line(const std::string& s) {
  size_t b = 0;
  while (b < s.size() && (s[b] == '\n' || s[b] == ' ')) ++b;
  const auto nl = s.find('\n', b);
  return nl == std::string::npos ? s.substr(b) : s.substr(b, nl - b);
}

std::string brief(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e))
    return first_line(c->what_without_backtrace());
  return first_line(e.what());
}

std::runtime_error corrupt_checkpoint(const std::string& path, const std::string& why) {
  return std::runtime_error("checkpoint '" + path + "' is corrupt or not a checkpoint (" + why +
                            ")");
}

// Reads every entry of the zip archive through libzip, which checks the archive's structure
// (ZIP_CHECKCONS) and each entry's CRC-32. LibTorch's own reader checks neither and goes on to
// parse the archive's TorchScript type definitions, which can crash on corrupt bytes (found by
// fuzz/fuzz_checkpoint: a segfault in torch::jit::ScriptTypeParser).
void verify_archive(const std::string& path) {
  auto corrupt = [&](const std::string& why) { return corrupt_checkpoint(path, why); };
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw corrupt("zip: " + why);
  }
  std::unique_ptr<zip_t, void (*)(zip_t*)> guard(z, zip_discard);
  const zip_int64_t n = zip_get_num_entries(z, 0);
  std::vector<char> buf(1 << 20);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    if (!f) throw corrupt("zip: " + std::string(zip_strerror(z)));
    zip_int64_t got;
    while ((got = zip_fread(f, buf.data(), buf.size())) > 0) {
    }
    const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    const std::string why = got < 0 ? zip_file_strerror(f) : "";
    zip_fclose(f);
    if (got < 0) throw corrupt("zip entry '" + std::string(name ? name : "?") + "': " + why);
  }
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  if (!fs::is_regular_file(path))
    throw std::runtime_error("checkpoint '" + path + "' does not exist");
  verify_archive(path);
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path);
  } catch (const std::exception& e) {
    // c10::Error, or torch::jit::ErrorReport when a corrupt archive names unknown types
    // (found by fuzz/fuzz_checkpoint).
    throw corrupt_checkpoint(path, brief(e));
  }
  c10::IValue format;
  if (!ar.try_read("format", format) || !format.isString() || format.toStringRef() != kFormat)
    throw std::runtime_error("checkpoint '" + path + "' is not a " + kFormat + " file");
  return ar;
}
}  // namespace

void save_checkpoint(const std::string& path, models::SequenceModel& model,
                     torch::optim::Optimizer* optimizer, const RunConfig& config, int64_t step,
                     const data::Tokenizer& tokenizer, double train_seconds) {
  torch::serialize::OutputArchive ar;
  ar.write("format", c10::IValue(std::string(kFormat)));
  ar.write("config", c10::IValue(config.to_toml()));
  ar.write("step", c10::IValue(step));
  ar.write("train_seconds", c10::IValue(train_seconds));
  if (!tokenizer.is_bytes()) {
    // As raw bytes: a serialized protobuf is not valid UTF-8 text.
    const std::string& proto = tokenizer.serialized();
    at::Tensor bytes = at::empty({static_cast<int64_t>(proto.size())}, at::kByte);
    std::memcpy(bytes.data_ptr<uint8_t>(), proto.data(), proto.size());
    ar.write("tokenizer", bytes);
  }
  torch::serialize::OutputArchive model_ar;
  model->save(model_ar);
  ar.write("model", model_ar);
  if (optimizer) {
    torch::serialize::OutputArchive opt_ar;
    optimizer->save(opt_ar);
    ar.write("optimizer", opt_ar);
    ar.write("rng", at::detail::getDefaultCPUGenerator().get_state());
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
    : path_(std::move(path)), archive_(open_archive(path_)), config_(config_in(archive_, path_)) {}

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

int64_t CheckpointFile::load(models::SequenceModel& model, torch::optim::Optimizer* optimizer,
                            double* train_seconds) {
  check_open("load");
  c10::IValue step;
  if (!archive_.try_read("step", step) || !step.isInt())
    throw std::runtime_error("checkpoint '" + path_ + "' holds no step");
  if (train_seconds) {
    c10::IValue s;
    *train_seconds = archive_.try_read("train_seconds", s) && s.isDouble() ? s.toDouble() : 0.0;
  }
  try {
    torch::serialize::InputArchive model_ar;
    archive_.read("model", model_ar);
    // Module::load adopts whatever shape it reads; a silent resize would hide an
    // incompatible checkpoint, so compare against the shapes the config gave the model.
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
    for (const auto& p : model->named_parameters())
      expected.emplace_back(p.key(), p.value().sizes().vec());
    model->load(model_ar);
    auto params = model->named_parameters();
    for (const auto& [key, shape] : expected) {
      const at::Tensor& t = params[key];
      if (t.sizes().vec() != shape)
        throw std::runtime_error("parameter '" + key + "' has shape " + c10::str(t.sizes()) +
                                 " in the checkpoint but " + c10::str(at::IntArrayRef(shape)) +
                                 " in the model");
    }
    if (optimizer) {
      torch::serialize::InputArchive opt_ar;
      archive_.read("optimizer", opt_ar);
      optimizer->load(opt_ar);
      at::Tensor rng;
      archive_.read("rng", rng);
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(rng);
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("checkpoint '" + path_ + "' does not fit this model: " + e.what());
  } catch (const std::exception& e) {  // c10::Error, torch::jit::ErrorReport, ...
    throw std::runtime_error("checkpoint '" + path_ + "' does not fit this model (" + brief(e) +
                             ")");
  }
  return step.toInt();
}

std::string find_checkpoint(const std::string& run_or_file) {
  if (fs::is_directory(run_or_file)) {
    const fs::path p = fs::path(run_or_file) / "checkpoint.pt";
    if (!fs::is_regular_file(p))
      throw std::runtime_error("run folder '" + run_or_file + "' has no checkpoint.pt");
    return p.string();
  }
  if (!fs::is_regular_file(run_or_file))
    throw std::runtime_error("'" + run_or_file + "' is neither a run folder nor a checkpoint file");
  return run_or_file;
}

}  // namespace seqmix::train
