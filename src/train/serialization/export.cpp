#include "seqmix/train/serialization/export.h"

#include <ATen/CPUGeneratorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <toml++/toml.h>

#include <cstring>
#include <limits>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "archive_check.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/files.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {

c10::impl::GenericDict new_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

// A TOML value of RunConfig::to_toml() as a plain Python value: tables become dicts, arrays
// lists (of any element type, so the pickle needs no specialised list global).
c10::IValue to_ivalue(const toml::node& n) {
  if (const auto* t = n.as_table()) {
    auto d = new_dict();
    for (auto&& [k, v] : *t) d.insert(std::string(k.str()), to_ivalue(v));
    return d;
  }
  if (const auto* a = n.as_array()) {
    c10::impl::GenericList l(c10::AnyType::get());
    for (const auto& v : *a) l.push_back(to_ivalue(v));
    return l;
  }
  if (const auto* s = n.as_string()) return c10::IValue(s->get());
  if (const auto* i = n.as_integer()) return c10::IValue(i->get());
  if (const auto* f = n.as_floating_point()) return c10::IValue(f->get());
  if (const auto* b = n.as_boolean()) return c10::IValue(b->get());
  throw std::logic_error("export: the configuration holds a TOML date or time");
}

std::string type_name(const c10::IValue& v) { return v.type()->str(); }

// The inverse of to_ivalue, for an export's "config"; `key` names the value in errors.
void put_toml(toml::table& into, const std::string& name, const c10::IValue& v,
              const std::string& key, const std::string& file);

toml::array to_toml_array(const c10::IValue& v, const std::string& key, const std::string& file) {
  toml::array a;
  const auto list = v.toListRef();
  for (size_t i = 0; i < list.size(); ++i) {
    const c10::IValue& e = list[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (e.isString()) a.push_back(e.toStringRef());
    else if (e.isBool()) a.push_back(e.toBool());
    else if (e.isInt()) a.push_back(e.toInt());
    else if (e.isDouble()) a.push_back(e.toDouble());
    else if (e.isList()) a.push_back(to_toml_array(e, at, file));
    else
      throw std::runtime_error("export '" + file + "': configuration value '" + at + "' is a " +
                               type_name(e) + ", not a str, int, float, bool or list");
  }
  return a;
}

toml::table to_toml_table(const c10::IValue& v, const std::string& key, const std::string& file) {
  toml::table t;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString())
      throw std::runtime_error("export '" + file + "': configuration table '" + key +
                               "' has a key that is not a string");
    const std::string name = kv.key().toStringRef();
    put_toml(t, name, kv.value(), key.empty() ? name : key + "." + name, file);
  }
  return t;
}

void put_toml(toml::table& into, const std::string& name, const c10::IValue& v,
              const std::string& key, const std::string& file) {
  if (v.isGenericDict()) into.insert(name, to_toml_table(v, key, file));
  else if (v.isList()) into.insert(name, to_toml_array(v, key, file));
  else if (v.isString()) into.insert(name, v.toStringRef());
  else if (v.isBool()) into.insert(name, v.toBool());
  else if (v.isInt()) into.insert(name, v.toInt());
  else if (v.isDouble()) into.insert(name, v.toDouble());
  else
    throw std::runtime_error("export '" + file + "': configuration value '" + key + "' is a " +
                             type_name(v) + ", not a str, int, float, bool, list or dict");
}

std::string shape(const at::Tensor& t) { return c10::str(t.sizes()); }


// The model's parameters and buffers, in the order state_dict() gives them, with their kind.
std::vector<std::pair<std::string, std::pair<at::Tensor, const char*>>> model_tensors(
    models::SequenceModel& model) {
  std::vector<std::pair<std::string, std::pair<at::Tensor, const char*>>> out;
  for (const auto& p : model->named_parameters()) out.push_back({p.key(), {p.value(), "parameter"}});
  for (const auto& b : model->named_buffers()) out.push_back({b.key(), {b.value(), "buffer"}});
  return out;
}

// Copies `stored` (name -> tensor, in the file's order) into `model`, strictly (see
// load_export). `what` starts every message: "export 'x.pt'".
// `theirs` introduces the model's shape ("the model's is").
void load_strict(const std::string& what, const std::vector<std::pair<std::string, at::Tensor>>& stored,
                 models::SequenceModel& model, const std::string& theirs = "the model's is") {
  const auto mine = model_tensors(model);
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < mine.size(); ++i) index.emplace(mine[i].first, i);
  std::unordered_map<std::string, const at::Tensor*> by_name;
  for (const auto& [key, t] : stored) {
    if (!index.count(key))
      throw std::runtime_error(what + " holds tensor '" + key +
                               "' that a model with this configuration does not have");
    by_name[key] = &t;
  }
  for (const auto& [key, m] : mine)
    if (!by_name.count(key))
      throw std::runtime_error(what + " lacks " + m.second + " '" + key +
                               "' that a model with this configuration has");
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const auto& [key, m] : mine) {
    const at::Tensor& t = *by_name.at(key);
    const at::Tensor& dst = m.first;
    const std::string name = std::string(m.second) + " '" + key + "'";
    if (!t.defined()) throw std::runtime_error(what + ": " + name + " holds no tensor");
    if (t.sizes() != dst.sizes())
      throw std::runtime_error(what + ": " + name + " has shape " + shape(t) +
                               ", " + theirs + " " + shape(dst));
    const bool float_ok = t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble;
    if (at::isFloatingType(dst.scalar_type()) ? !float_ok : t.scalar_type() != dst.scalar_type())
      throw std::runtime_error(
          what + ": " + name + " holds " + c10::toString(t.scalar_type()) + " values; seqmix reads " +
          (at::isFloatingType(dst.scalar_type()) ? std::string("float32 or float64")
                                                 : std::string(c10::toString(dst.scalar_type()))) +
          " for it");
    if (!detail::finite_values(t)) throw std::runtime_error(what + " holds non-finite values in " + name);
    // Finite float64 values can still overflow the model's float32 (1e300 becomes inf).
    at::Tensor value = t.to(dst.scalar_type());
    if (!detail::finite_values(value))
      throw std::runtime_error(
          what + ": " + name + " holds values beyond the range of the model's " +
          c10::toString(dst.scalar_type()) + " (largest magnitude " +
          c10::str(t.abs().max().item<double>()) + ", the most " +
          c10::toString(dst.scalar_type()) + " holds is " +
          c10::str(dst.scalar_type() == at::kFloat ? std::numeric_limits<float>::max()
                                                    : std::numeric_limits<double>::max()) +
          ")");
    copies.emplace_back(dst, std::move(value));
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, t] : copies) dst.copy_(t);
}

// A path a user gave for a file seqmix writes: no control characters, not a folder, not an
// existing file unless `overwrite`, not a run's own files.
void check_out_file(const std::string& out_file, bool overwrite, const std::string& source) {
  util::check_path_text(out_file, "`out_file`");
  if (out_file.empty()) throw std::runtime_error("export: no output file given (`out_file`)");
  std::error_code ec;
  const fs::path out(out_file);
  if (fs::is_directory(out, ec))
    throw std::runtime_error("export: '" + out_file + "' is a folder; give a file name");
  util::check_replaceable(out_file);
  if (fs::exists(out, ec) && fs::exists(source, ec) && fs::equivalent(out, source, ec))
    throw std::runtime_error("export: '" + out_file +
                             "' is the checkpoint being exported; give another file");
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const std::string base = out.filename().string();
  // A run folder belongs to its run (README): only `train` writes into one.
  if (!util::run_files_in(dir.string()).empty())
    throw std::runtime_error(
        "export: '" + out_file + "' is " +
        (base == "checkpoint.pt" || base == "config.toml" || base == "metrics.jsonl" ||
                 base == "tokenizer.model"
             ? "a run folder's " + base
             : "in a training run's folder") +
        "; give a file outside the run's folder");
  if (!overwrite && fs::exists(out, ec))
    throw std::runtime_error("export: '" + out_file + "' exists; give `overwrite` to replace it");
}

}  // namespace

// `value` as a torch.save file that torch.load(FILE) opens under its default
// weights_only=True: torch::pickle_save tags every dict and list with
// torch.jit._pickle.restore_type_tag, a global the restricted unpickler refuses, so the
// pickle is written here without those tags (dicts, lists of Any, strings, numbers and
// tensors only: what torch.load's allowlist takes). Tensors are stored as torch.save stores
// them: one record data/<key> per storage, in the archive PyTorch's own writer makes.
namespace {
std::vector<char> pickle_for_torch_load(const c10::IValue& value) {
  std::vector<char> pickled;
  std::vector<at::Tensor> storages;  // one tensor per storage, in the order of their keys
  torch::jit::Pickler pickler(
      [&](const char* data, size_t n) { pickled.insert(pickled.end(), data, data + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/
      [&](const at::Tensor& t) {
        storages.push_back(t);
        return std::to_string(storages.size() - 1);
      },
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> file;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    const char* bytes = static_cast<const char*>(data);
    file.insert(file.end(), bytes, bytes + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickled.data(), pickled.size());
  for (size_t i = 0; i < storages.size(); ++i) {
    const c10::Storage& st = storages[i].storage();
    TORCH_CHECK(st.device().is_cpu(), "export: tensor storage ", i, " is not on the CPU");
    writer.writeRecord("data/" + std::to_string(i), st.data(), st.nbytes());
  }
  writer.writeEndOfFile();
  return file;
}
}  // namespace

void export_run(const std::string& run_or_checkpoint, const std::string& out_file,
                bool overwrite) {
  const std::string source = find_checkpoint(run_or_checkpoint);
  check_out_file(out_file, overwrite, source);
  LoadedRun run = load_run(run_or_checkpoint);

  c10::Dict<std::string, at::Tensor> state;
  for (const auto& [key, m] : model_tensors(run.model))
    state.insert(key, m.first.detach().contiguous());
  auto d = new_dict();
  d.insert("format", std::string(kExportFormat));
  d.insert("version", kExportVersion);
  d.insert("state_dict", state);
  d.insert("config", to_ivalue(toml::parse(run.config.to_toml())));
  if (run.tokenizer.is_bytes()) {
    d.insert("tokenizer", std::string("bytes"));
  } else {
    const std::string& proto = run.tokenizer.serialized();
    at::Tensor bytes = at::empty({static_cast<int64_t>(proto.size())}, at::kByte);
    std::memcpy(bytes.data_ptr<uint8_t>(), proto.data(), proto.size());
    d.insert("tokenizer", bytes);
  }
  d.insert("seqmix_version", std::string(SEQMIX_VERSION));
  std::vector<char> bytes;
  try {
    bytes = pickle_for_torch_load(c10::IValue(d));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw std::runtime_error("export: cannot serialize '" + out_file +
                             "': " + what.substr(0, what.find('\n')));
  }
  const fs::path dir = fs::path(out_file).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("export: cannot create folder '" + dir.string() + "': " + ec.message());
  util::write_file_atomic(out_file, std::string(bytes.begin(), bytes.end()));
}

void load_state_dict(models::SequenceModel& model,
                     const std::vector<std::pair<std::string, at::Tensor>>& state,
                     const std::string& what) {
  load_strict(what, state, model);
}

LoadedRun load_export(const std::string& file, const RunRequest* bare_config) {
  const std::string what = "export '" + file + "'";
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    if (bare_config)
      throw std::invalid_argument(
          what + " is a Hugging Face folder, which holds its own configuration (config.json); "
                 "a configuration (model.preset, model.size, a config file, overrides, a "
                 "tokenizer) applies only to a bare state dict");
    return load_hf_export(file);
  }
  detail::verify_plain_pickle(file, "export", "a seqmix export or state dict");
  c10::IValue root;
  {
    const std::string text = util::read_file(file);
    try {
      root = torch::pickle_load(std::vector<char>(text.begin(), text.end()));
    } catch (const std::exception&) {  // c10::Error, torch::jit::ErrorReport, ...
      throw std::runtime_error(what + " is corrupt (LibTorch cannot read its pickle)");
    }
  }
  if (!root.isGenericDict()) throw std::runtime_error(what + " does not hold a dict");
  const auto dict = root.toGenericDict();
  auto entry = [&](const char* key) -> c10::IValue {
    const auto it = dict.find(c10::IValue(std::string(key)));
    return it == dict.end() ? c10::IValue() : it->value();
  };
  // Every tensor as LibTorch made it: inside its storage (the file was checked before).
  auto tensors_of = [&](const c10::impl::GenericDict& d, const std::string& prefix) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& kv : d) {
      if (!kv.key().isString())
        throw std::runtime_error(what + ": " + prefix + " has a key that is not a string");
      const std::string key = kv.key().toStringRef();
      if (!kv.value().isTensor())
        throw std::runtime_error(what + " is neither a seqmix export (it has no 'format' entry) "
                                 "nor a bare state dict: " + prefix + " entry '" + key +
                                 "' is a " + type_name(kv.value()) + ", not a tensor");
      detail::check_loaded_tensor(file, key, kv.value().toTensor(), "export");
      out.emplace_back(key, kv.value().toTensor());
    }
    return out;
  };

  LoadedRun loaded;
  std::vector<std::pair<std::string, at::Tensor>> stored;
  const c10::IValue format = entry("format");
  if (!format.isNone()) {
    if (!format.isString() || format.toStringRef() != kExportFormat)
      throw std::runtime_error(what + " has format " +
                               (format.isString() ? "'" + format.toStringRef() + "'"
                                                  : "of type " + type_name(format)) +
                               "; seqmix reads '" + kExportFormat +
                               "' files and bare state dicts");
    const c10::IValue version = entry("version");
    if (!version.isInt() || version.toInt() < 1)
      throw std::runtime_error(what + " has no valid 'version' entry");
    if (version.toInt() > kExportVersion)
      throw std::runtime_error(what + " has version " + std::to_string(version.toInt()) +
                               " (written by a newer seqmix); this seqmix reads version " +
                               std::to_string(kExportVersion));
    if (bare_config)
      throw std::invalid_argument(
          what + " is a seqmix export, which holds its own configuration; a configuration "
                 "(model.preset, model.size, a config file, overrides, a tokenizer) applies only to a "
                 "bare state dict");
    const c10::IValue config = entry("config");
    if (!config.isGenericDict()) throw std::runtime_error(what + " has no 'config' dict");
    std::ostringstream toml_text;
    toml_text << to_toml_table(config, "", file);
    try {
      loaded.config = RunConfig::from_toml(toml_text.str(), "configuration in " + what);
      loaded.config.validate();
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(what + " holds an invalid configuration: " + e.what());
    }
    const c10::IValue tok = entry("tokenizer");
    const bool bytes_run = loaded.config.data.tokenizer == "bytes";
    if (tok.isString() && tok.toStringRef() == "bytes") {
      if (!bytes_run)
        throw std::runtime_error(what + " names tokenizer '" + loaded.config.data.tokenizer +
                                 "' in its configuration but holds none ('tokenizer' is 'bytes')");
    } else if (tok.isTensor() && tok.toTensor().scalar_type() == at::kByte &&
               tok.toTensor().dim() == 1) {
      if (bytes_run)
        throw std::runtime_error(what + " is a byte-level run (data.tokenizer = 'bytes') but "
                                 "holds a SentencePiece model");
      detail::check_loaded_tensor(file, "tokenizer", tok.toTensor(), "export");
      const at::Tensor t = tok.toTensor().contiguous();
      const std::string proto(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()),
                              static_cast<size_t>(t.numel()));
      loaded.tokenizer = data::Tokenizer::from_serialized(proto, "the tokenizer in " + what);
    } else {
      throw std::runtime_error(what + ": its 'tokenizer' entry is neither 'bytes' nor a 1-D "
                               "uint8 tensor");
    }
    check_tokenizer(loaded.config, loaded.tokenizer);
    const c10::IValue sd = entry("state_dict");
    if (!sd.isGenericDict()) throw std::runtime_error(what + " has no 'state_dict' dict");
    stored = tensors_of(sd.toGenericDict(), "its 'state_dict'");
  } else {
    stored = tensors_of(dict, "the dict");
    if (!bare_config)
      throw std::runtime_error(what + " holds no configuration (a bare state dict): give it "
                               "with model.preset / model.size, a config file or overrides "
                               "(and data.tokenizer for a SentencePiece model)");
    loaded.config = resolve_run(*bare_config);
    loaded.tokenizer = resolve_tokenizer(loaded.config);
  }
  loaded.config.check_resources(false);
  loaded.model = models::SequenceModel(loaded.config.model);
  load_strict(what, stored, loaded.model);
  loaded.model->eval();
  return loaded;
}

void save_run(const std::string& out_dir, models::SequenceModel& model, const RunConfig& config,
              const data::Tokenizer& tokenizer, int64_t step, bool overwrite) {
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("save_run: invalid configuration: ") + e.what());
  }
  if (step < 0)
    throw std::invalid_argument("save_run: step must be >= 0, got " + std::to_string(step));
  if (!model) throw std::invalid_argument("save_run: no model given");
  check_tokenizer(config, tokenizer);
  // The model train() would build for this configuration: its parameters are checked against
  // `model`'s, take their values, and are what the checkpoint and optimizer are written from
  // (so the optimizer's parameter groups are exactly a fresh run's).
  // Building it draws an initialisation from the default generator: restored afterwards, so
  // that saving leaves the caller's random stream as it was.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor rng_state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng_state = generator.get_state();
  }
  models::SequenceModel fresh(config.model);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_state);
  }
  {
    std::vector<std::pair<std::string, at::Tensor>> given;
    for (const auto& [key, m] : model_tensors(model)) given.emplace_back(key, m.first.detach());
    try {
      load_strict("save_run: the model given", given, fresh,
                  "a model of this configuration has");
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(e.what());
    }
  }
  fresh->train(model->is_training());
  auto optimizer = make_optimizer(fresh, config.train);

  util::check_path_text(out_dir, "run folder");
  if (out_dir.empty()) throw std::invalid_argument("save_run: no run folder given");
  const fs::path out(out_dir);
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw std::runtime_error("run folder '" + out_dir + "' exists and is not a folder");
  const bool created_dir = !fs::exists(out, ec);
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw std::runtime_error("cannot create run folder '" + out_dir + "': " + ec.message());
  std::vector<fs::path> temps = {out / ".checkpoint.pt.saving", out / ".config.toml.saving",
                                 out / ".tokenizer.model.saving"};
  std::vector<fs::path> placed;  // files of the new run already renamed into place
  auto clean = [&] {
    std::error_code e2;
    for (const auto& p : placed) fs::remove(p, e2);
    for (const auto& p : temps) {
      fs::remove(p, e2);
      fs::remove(p.string() + ".tmp", e2);
    }
    if (created_dir) fs::remove(out, e2);  // only if empty
  };
  // A Ctrl-C from here waits until the run is in place or its temporaries are removed.
  const util::HoldStopSignals hold;
  try {
    util::FolderLock lock(out.string(), "run folder");
    const auto existing = util::run_files_in(out.string());
    if (!existing.empty() && !overwrite) {
      std::string names;
      for (const auto& f : existing) names += (names.empty() ? "" : ", ") + f;
      throw std::runtime_error("run folder '" + out_dir + "' already holds a run (" + names +
                               "); replace it with `overwrite`, or give another folder");
    }
    if (existing.empty() && !created_dir)
      for (const auto& e : fs::directory_iterator(out, ec)) {
        (void)e;
        throw std::runtime_error("run folder '" + out_dir +
                                 "' is not empty and holds no seqmix run; give a new or empty "
                                 "folder");
      }
    save_checkpoint(temps[0].string(), fresh, optimizer.get(), config, step, tokenizer);
    util::write_file_atomic(temps[1].string(), config.to_toml());
    if (!tokenizer.is_bytes()) tokenizer.save(temps[2].string());
    // The folder now changes: the old run's metrics and tokenizer go, the new files come in.
    for (const char* old : {"metrics.jsonl", "tokenizer.model"}) {
      fs::remove(out / old, ec);
      if (ec) throw std::runtime_error("cannot remove '" + (out / old).string() + "': " + ec.message());
    }
    if (!tokenizer.is_bytes()) {
      fs::rename(temps[2], out / "tokenizer.model");
      placed.push_back(out / "tokenizer.model");
    }
    fs::rename(temps[1], out / "config.toml");
    placed.push_back(out / "config.toml");
    fs::rename(temps[0], out / "checkpoint.pt");
  } catch (const fs::filesystem_error& e) {
    clean();
    throw std::runtime_error("cannot write run folder '" + out_dir + "': " + e.what());
  } catch (...) {
    clean();
    throw;
  }
}

}  // namespace seqmix::train
