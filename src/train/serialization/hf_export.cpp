// The Hugging Face folder of export.h: model.safetensors, config.json and, for a
// SentencePiece run, tokenizer.model; written whole or not at all, and read back strictly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/train/serialization/safetensors.h"
#include "seqmix/util/files.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"

// safetensors stores little-endian elements; seqmix copies tensors' bytes as they lie.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "seqmix needs a little-endian machine");

namespace seqmix::train {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// ---- dtypes ----------------------------------------------------------------------------

const std::pair<const char*, at::ScalarType> kDtypes[] = {
    {"BOOL", at::kBool},    {"U8", at::kByte},         {"I8", at::kChar},
    {"U16", at::kUInt16},   {"I16", at::kShort},       {"F16", at::kHalf},
    {"BF16", at::kBFloat16}, {"U32", at::kUInt32},      {"I32", at::kInt},
    {"F32", at::kFloat},    {"U64", at::kUInt64},      {"I64", at::kLong},
    {"F64", at::kDouble},   {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2}};

at::ScalarType scalar_type(const std::string& dtype) {
  for (const auto& [name, type] : kDtypes)
    if (dtype == name) return type;
  throw std::logic_error("safetensors dtype '" + dtype + "' has no LibTorch type");
}

std::string dtype_name(at::ScalarType type, const std::string& tensor) {
  for (const auto& [name, t] : kDtypes)
    if (t == type) return name;
  throw std::runtime_error("export: tensor '" + tensor + "' holds " + c10::toString(type) +
                           " values, which safetensors cannot store");
}

// ---- the configuration as JSON and back -------------------------------------------------

// RunConfig::to_toml() as JSON: tables become objects, arrays lists. nlohmann writes each
// double in the fewest digits that read back as the same double (and keeps a ".0" on whole
// ones, so a float stays a float), so the configuration survives the trip exactly.
ordered_json to_json(const toml::node& n, const std::string& key) {
  if (const auto* t = n.as_table()) {
    ordered_json o = ordered_json::object();
    for (auto&& [k, v] : *t) {
      const std::string name(k.str());
      o[name] = to_json(v, key.empty() ? name : key + "." + name);
    }
    return o;
  }
  if (const auto* a = n.as_array()) {
    ordered_json l = ordered_json::array();
    for (size_t i = 0; i < a->size(); ++i)
      l.push_back(to_json(*a->get(i), key + "[" + std::to_string(i) + "]"));
    return l;
  }
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* i = n.as_integer()) return i->get();
  if (const auto* b = n.as_boolean()) return b->get();
  if (const auto* f = n.as_floating_point()) {
    // JSON has no NaN or infinity (validate() refuses them in a configuration anyway).
    if (!std::isfinite(f->get()))
      throw std::logic_error("export: configuration value '" + key + "' is not finite");
    return f->get();
  }
  throw std::logic_error("export: configuration value '" + key + "' is a TOML date or time");
}

void put_toml(toml::table& into, const std::string& name, const json& v,
              const std::string& key, const std::string& what);

// A JSON integer as TOML's (signed 64-bit) one.
int64_t integer(const json& v, const std::string& key, const std::string& what) {
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error(what + ": configuration value '" + key + "' (" + v.dump() +
                             ") is beyond the 64-bit integers");
  return v.get<int64_t>();
}

toml::array to_toml_array(const json& v, const std::string& key, const std::string& what) {
  toml::array a;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (e.is_string()) a.push_back(e.get<std::string>());
    else if (e.is_boolean()) a.push_back(e.get<bool>());
    else if (e.is_number_integer()) a.push_back(integer(e, at, what));
    else if (e.is_number_float()) a.push_back(e.get<double>());
    else if (e.is_array()) a.push_back(to_toml_array(e, at, what));
    else
      throw std::runtime_error(what + ": configuration value '" + at + "' is " + e.type_name() +
                               ", not a string, number, boolean or list");
  }
  return a;
}

toml::table to_toml_table(const json& v, const std::string& key, const std::string& what) {
  toml::table t;
  for (const auto& [name, value] : v.items())
    put_toml(t, name, value, key.empty() ? name : key + "." + name, what);
  return t;
}

// One value of config.json's "seqmix"."config" into `into`; `key` names it in errors
// ("model.aib.bias").
void put_toml(toml::table& into, const std::string& name, const json& v,
              const std::string& key, const std::string& what) {
  if (v.is_object()) {
    into.insert(name, to_toml_table(v, key, what));
  } else if (v.is_array()) {
    into.insert(name, to_toml_array(v, key, what));
  } else if (v.is_string()) {
    into.insert(name, v.get<std::string>());
  } else if (v.is_boolean()) {
    into.insert(name, v.get<bool>());
  } else if (v.is_number_integer()) {
    into.insert(name, integer(v, key, what));
  } else if (v.is_number_float()) {
    into.insert(name, v.get<double>());
  } else {
    throw std::runtime_error(what + ": configuration value '" + key + "' is " + v.type_name() +
                             ", not a string, number, boolean, list or object");
  }
}

const char* architecture(const RunConfig& c) {
  return c.model.n_classes > 0 ? "SeqmixForSequenceClassification" : "SeqmixForCausalLM";
}

// The fields of config.json that transformers reads, with the key of the configuration each
// one repeats.
std::vector<std::pair<const char*, std::pair<const char*, int64_t>>> hf_fields(const RunConfig& c) {
  return {{"vocab_size", {"model.vocab_size", c.model.vocab_size}},
          {"hidden_size", {"model.d_model", c.model.d_model}},
          {"num_hidden_layers", {"model.n_layers", c.model.n_layers}},
          {"num_attention_heads", {"model.n_heads", c.model.n_heads}},
          {"max_position_embeddings", {"model.max_len", c.model.max_len}}};
}

std::string config_json(const RunConfig& config, const data::Tokenizer& tokenizer) {
  ordered_json j = ordered_json::object();
  j["model_type"] = "seqmix";
  j["architectures"] = {architecture(config)};
  for (const auto& [field, key_value] : hf_fields(config)) j[field] = key_value.second;
  // seqmix ties the output projection to the embedding itself (model.tie_embeddings);
  // transformers must not tie them again from this flag.
  j["tie_word_embeddings"] = false;
  ordered_json s = ordered_json::object();
  s["format"] = kHfExportFormat;
  s["version"] = SEQMIX_VERSION;
  s["tokenizer"] = tokenizer.is_bytes() ? "bytes" : "sentencepiece";
  s["config"] = to_json(toml::parse(config.to_toml()), "");
  j["seqmix"] = std::move(s);
  return j.dump(2) + "\n";
}

// ---- writing a folder whole --------------------------------------------------------------

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

// A new file (never an existing one, never through a link), its bytes on disk before return.
void write_new_file(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot write '" + path.string() + "'", errno);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("cannot write '" + path.string() + "'", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot write '" + path.string() + "'", err);
  }
  if (::close(fd) != 0) fail("cannot write '" + path.string() + "'", errno);
}

// A folder's entries on disk, so that a rename of them or into it survives a crash.
void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open folder '" + dir.string() + "'", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) fail("cannot sync folder '" + dir.string() + "'", err);
}

bool is_export_file(const std::string& name) {
  return name == "config.json" || name == "model.safetensors";
}

// The files an export writes; --overwrite replaces these and keeps every other file.
bool written_by_export(const std::string& name) {
  return is_export_file(name) || name == "tokenizer.model";
}

// Carries the files a user added to an export's folder (a README.md model card, say) into
// the new folder before the swap, so --overwrite replaces only what seqmix wrote. Hard links
// (tmp is a sibling, one file system) cost nothing; a copy where links are refused.
void carry_user_files(const fs::path& out, const fs::path& tmp) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (written_by_export(name)) continue;
    std::error_code link_ec;
    fs::create_hard_link(e.path(), tmp / name, link_ec);
    if (!link_ec) continue;
    std::error_code copy_ec;
    fs::copy_file(e.path(), tmp / name, copy_ec);
    if (copy_ec)
      throw std::runtime_error("export: cannot keep '" + e.path().string() +
                               "' (a file seqmix did not write) in the new export: " +
                               copy_ec.message() + "; nothing was replaced");
  }
  if (ec)
    throw std::runtime_error("export: cannot read folder '" + out.string() + "': " +
                             ec.message());
}

// What `out` is now: absent (false), an empty folder (false) or a folder holding files
// (true, only with `overwrite`, and only an export's folder). Anything else is refused: a
// file, link, FIFO or device at `out` (seqmix never writes through or over one), a run's
// folder, or a folder that holds more than files beside an export (removing it would lose
// what seqmix did not write).
bool check_out_dir(const std::string& out_dir, bool overwrite) {
  const char* kind = util::file_type_description(out_dir);
  if (!kind) return false;
  if (std::strcmp(kind, "a folder") != 0)
    throw std::runtime_error("export: '" + out_dir + "' is " + kind +
                             "; `seqmix export --format hf` writes a folder there and replaces "
                             "only a folder: give another path, or remove it first");
  if (!util::run_files_in(out_dir).empty())
    throw std::runtime_error("export: '" + out_dir +
                             "' is a training run's folder; give a folder outside the run");
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    const char* k = util::file_type_description(e.path().string());
    if (overwrite && (!k || std::strcmp(k, "a regular file") != 0))
      throw std::runtime_error("export: '" + out_dir + "' holds '" + name + "', which is " +
                               (k ? k : "gone") + "; seqmix replaces only a folder of files "
                               "that an export wrote: give another folder, or remove it first");
    names.push_back(name);
  }
  if (ec)
    throw std::runtime_error("export: cannot read folder '" + out_dir + "': " + ec.message());
  if (names.empty()) return false;
  if (!overwrite)
    throw std::runtime_error("export: folder '" + out_dir +
                             "' exists and is not empty; give `overwrite` to replace it");
  if (std::none_of(names.begin(), names.end(), is_export_file))
    throw std::runtime_error("export: folder '" + out_dir +
                             "' holds no export (config.json, model.safetensors); seqmix "
                             "replaces only an export's folder: give another folder");
  return true;
}

// Puts the folder `tmp` (complete and synced) at `out`. An absent or empty `out` is
// replaced by one rename; a full one is swapped with it in one step (renameat2's
// RENAME_EXCHANGE, so `out` is never missing) and then removed, or, on a file system
// without the exchange, moved aside first and put back if the second rename fails.
void put_in_place(const fs::path& tmp, const fs::path& out, bool full) {
  const std::string where = "cannot put '" + tmp.string() + "' at '" + out.string() + "'";
  if (!full) {
    if (std::rename(tmp.c_str(), out.c_str()) != 0) fail(where, errno);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // the old export now
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) fail(where, errno);
  const fs::path aside = tmp.string() + ".old";
  if (std::rename(out.c_str(), aside.c_str()) != 0) fail(where, errno);
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    std::rename(aside.c_str(), out.c_str());
    fail(where, err);
  }
  std::error_code ec;
  fs::remove_all(aside, ec);
}

// ---- reading ---------------------------------------------------------------------------

std::vector<std::pair<std::string, at::Tensor>> tensors_of(const SafetensorsFile& file,
                                                           const std::string& path) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& e : file.tensors) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(scalar_type(e.dtype)));
    const char* bytes = file.data(e);
    const size_t n = static_cast<size_t>(e.end - e.begin);
    // A bool byte other than 0 or 1 is undefined behaviour in every kernel that reads it.
    if (e.dtype == "BOOL")
      for (size_t i = 0; i < n; ++i)
        if (static_cast<uint8_t>(bytes[i]) > 1)
          throw std::runtime_error("safetensors file '" + path + "': tensor '" + e.name +
                                   "' holds a BOOL byte that is neither 0 nor 1");
    if (n) std::memcpy(t.data_ptr(), bytes, n);
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace

void export_run_hf(const std::string& run_or_checkpoint, const std::string& out_dir,
                   bool overwrite) {
  util::check_path_text(out_dir, "`out_dir`");
  std::string trimmed = out_dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path out(trimmed);
  const std::string name = out.filename().string();
  if (name.empty() || name == "." || name == ".." || trimmed == "/")
    throw std::runtime_error("export: `out_dir` '" + out_dir +
                             "' names no new folder; give one such as 'exports/wn-hf'");
  const std::string source = find_checkpoint(run_or_checkpoint);
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  // A run folder belongs to its run (README): only `train` writes into one.
  if (fs::is_directory(parent, ec) && !util::run_files_in(parent.string()).empty())
    throw std::runtime_error("export: '" + out_dir +
                             "' is inside a training run's folder; give a folder outside it");
  bool full = check_out_dir(trimmed, overwrite);
  if (full && fs::equivalent(fs::absolute(source, ec).parent_path(), out, ec))
    throw std::runtime_error("export: '" + out_dir + "' holds the checkpoint being exported ('" +
                             source + "'); give another folder");

  LoadedRun run = load_run(run_or_checkpoint);
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& p : run.model->named_parameters())
    state.emplace_back(p.key(), p.value().detach().contiguous());
  for (const auto& b : run.model->named_buffers())
    state.emplace_back(b.key(), b.value().detach().contiguous());
  std::vector<SafetensorsTensor> tensors;
  for (const auto& [key, t] : state)
    tensors.push_back({key, dtype_name(t.scalar_type(), key), t.sizes().vec(), t.data_ptr(),
                       static_cast<uint64_t>(t.nbytes())});
  std::vector<std::pair<std::string, std::string>> files = {
      {"model.safetensors", safetensors_bytes(tensors, {{"format", "pt"}})},
      {"config.json", config_json(run.config, run.tokenizer)}};
  state.clear();
  if (!run.tokenizer.is_bytes()) files.emplace_back("tokenizer.model", run.tokenizer.serialized());

  fs::create_directories(parent, ec);
  if (ec)
    throw std::runtime_error("export: cannot create folder '" + parent.string() + "': " +
                             ec.message());
  // A Ctrl-C from here waits until the folder is in place or the temporary one removed.
  const util::HoldStopSignals hold;
  // A sibling of `out`, so that the final rename stays on one file system.
  std::string tmp_name = (parent / ("." + name + ".export-XXXXXX")).string();
  if (!::mkdtemp(tmp_name.data()))
    fail("export: cannot create a folder beside '" + out_dir + "'", errno);
  const fs::path tmp(tmp_name);
  try {
    for (const auto& [file, bytes] : files) write_new_file(tmp / file, bytes);
    // mkdtemp's 0700 would hide the export from other users: a folder's usual mode instead.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::chmod(tmp.c_str(), 0777 & ~mask);
    sync_folder(tmp);
    // The folder may have changed while the model was read and written: judge it again.
    full = check_out_dir(trimmed, overwrite);
    if (full) carry_user_files(out, tmp);
    put_in_place(tmp, out, full);
    sync_folder(parent);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

LoadedRun load_hf_export(const std::string& dir) {
  const std::string what = "export '" + dir + "'";
  const fs::path root(dir);
  const std::string config_path = (root / "config.json").string();
  const std::string weights_path = (root / "model.safetensors").string();
  if (!util::run_files_in(dir).empty())
    throw std::runtime_error(what + " is a seqmix run folder, not an export: eval, generate "
                             "and train --resume read it as it is");
  for (const auto& p : {config_path, weights_path}) {
    const char* kind = util::file_type_description(p);
    if (!kind)
      throw std::runtime_error(what + " is a folder without " + fs::path(p).filename().string() +
                               "; seqmix imports a Hugging Face folder (config.json, "
                               "model.safetensors) as `seqmix export --format hf` writes it");
    if (std::strcmp(kind, "a regular file") != 0)
      throw std::runtime_error("export '" + p + "' is " + kind + ", not a regular file");
  }
  const std::string config_what = "export '" + config_path + "'";
  json j;
  {
    const std::string text = util::read_file(config_path);
    if (text.size() > 16'000'000)
      throw std::runtime_error(config_what + " is " + std::to_string(text.size()) +
                               " bytes, more than a configuration holds");
    j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw std::runtime_error(config_what + " is not valid JSON");
  }
  if (!j.is_object()) throw std::runtime_error(config_what + " does not hold a JSON object");
  const auto model_type = j.find("model_type");
  if (model_type == j.end() || !model_type->is_string() || *model_type != "seqmix")
    throw std::runtime_error(config_what + " has model_type " +
                             (model_type == j.end() ? std::string("missing")
                                                    : model_type->dump()) +
                             "; seqmix imports its own models (model_type \"seqmix\")");
  const auto s = j.find("seqmix");
  if (s == j.end() || !s->is_object())
    throw std::runtime_error(config_what + " has no \"seqmix\" object");
  const auto format = s->find("format");
  if (format == s->end() || !format->is_number_integer() || format->get<int64_t>() < 1)
    throw std::runtime_error(config_what + " has no valid seqmix.format");
  if (format->get<int64_t>() > kHfExportFormat)
    throw std::runtime_error(config_what + " has seqmix.format " + format->dump() +
                             " (written by a newer seqmix); this seqmix reads format " +
                             std::to_string(kHfExportFormat));
  const auto cfg = s->find("config");
  if (cfg == s->end() || !cfg->is_object())
    throw std::runtime_error(config_what + " has no seqmix.config object");

  LoadedRun loaded;
  {
    std::ostringstream toml_text;
    toml_text << to_toml_table(*cfg, "", config_what);
    try {
      loaded.config = RunConfig::from_toml(toml_text.str(), "configuration in " + config_what);
      loaded.config.validate();
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(config_what + " holds an invalid configuration: " + e.what());
    }
  }
  // The fields transformers reads repeat the configuration: a hand edit of one of them
  // alone would make the two disagree on the model.
  for (const auto& [field, key_value] : hf_fields(loaded.config)) {
    const auto it = j.find(field);
    if (it != j.end() && (!it->is_number_integer() || it->get<int64_t>() != key_value.second))
      throw std::runtime_error(config_what + " has " + field + " " + it->dump() + " but its " +
                               key_value.first + " is " + std::to_string(key_value.second));
  }
  if (const auto a = j.find("architectures");
      a != j.end() && *a != json::array({architecture(loaded.config)}))
    throw std::runtime_error(config_what + " has architectures " + a->dump() + "; a model " +
                             (loaded.config.model.n_classes > 0 ? "with" : "without") +
                             " model.n_classes is [\"" + architecture(loaded.config) + "\"]");

  const auto tok = s->find("tokenizer");
  const bool bytes_run = loaded.config.data.tokenizer == "bytes";
  if (tok == s->end() || !tok->is_string() || (*tok != "bytes" && *tok != "sentencepiece"))
    throw std::runtime_error(config_what + ": its seqmix.tokenizer is neither \"bytes\" nor "
                             "\"sentencepiece\"");
  if ((*tok == "bytes") != bytes_run)
    throw std::runtime_error(config_what + " has seqmix.tokenizer " + tok->dump() +
                             " but data.tokenizer '" + loaded.config.data.tokenizer + "'");
  const std::string path = (root / "tokenizer.model").string();
  const char* kind = util::file_type_description(path);
  // Which tokenizer decodes the model's tokens must not depend on who reads the folder.
  if (bytes_run && kind)
    throw std::runtime_error(what + " is a byte-level run (seqmix.tokenizer \"bytes\") but "
                             "also holds a tokenizer.model");
  if (!bytes_run) {
    if (!kind || std::strcmp(kind, "a regular file") != 0)
      throw std::runtime_error(what + " is a SentencePiece run (data.tokenizer '" +
                               loaded.config.data.tokenizer + "') but " +
                               (kind ? "its tokenizer.model is " + std::string(kind)
                                     : std::string("holds no tokenizer.model")));
    loaded.tokenizer =
        data::Tokenizer::from_serialized(util::read_file(path), "export '" + path + "'");
  }
  check_tokenizer(loaded.config, loaded.tokenizer);

  loaded.config.check_resources(false);
  const auto stored = tensors_of(read_safetensors(weights_path), weights_path);
  loaded.model = models::SequenceModel(loaded.config.model);
  load_state_dict(loaded.model, stored, "export '" + weights_path + "'");
  loaded.model->eval();
  return loaded;
}

}  // namespace seqmix::train
