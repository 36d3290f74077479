#include "common.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cerrno>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "seqmix/dist/launcher.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/models/catalog.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/files.h"
#include "seqmix/util/paths.h"
#include "seqmix/util/run_folder.h"

namespace seqmix::cli {

const char* const kDataDirHelp =
    "folder filled by scripts/setup.sh (default: $SEQMIX_DATA_DIR, else the source tree's "
    "data folder)";

std::string read_integer(const std::string& text, int64_t& value) {
  size_t used = 0;
  try {
    value = std::stoll(text, &used);
    if (used == text.size()) return "";
    const double d = std::stod(text, &used);
    if (used == text.size() && std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18) {
      value = static_cast<int64_t>(d);
      return "";
    }
  } catch (const std::out_of_range&) {
    return "expected an integer within +-9223372036854775807, got '" + text + "'";
  } catch (const std::exception&) {
  }
  return "expected an integer, got '" + text + "'";
}

void ConfigFlags::add_to(CLI::App* app) {
  app->add_option("--config", config_path, "TOML config file ([model], [data], [train])")
      ->check(CLI::ExistingFile);
  app->add_option("--model", model,
                  "model preset: " + models::preset_names_line() + " (`seqmix info` describes them)");
  std::string sizes;
  for (const auto& z : models::size_presets()) sizes += (sizes.empty() ? "" : ", ") + z.name;
  app->add_option("--size", size,
                  "model size: " + sizes + " (language modelling); cpu (default) or paper with "
                  "--task");
  app->add_option("--task", task,
                  "classification task instead of language modelling: listops, text, "
                  "retrieval, image, pathfinder, pathx (docs/TASKS.md)");
  app->add_option("--data", data, "corpus: sotu, moby-dick, or a text file/folder path");
  app->add_option("--data-dir", data_dir, kDataDirHelp);
  app->add_option("--tokenizer", tokenizer,
                  "bytes (default) or a SentencePiece model from `seqmix tokenizer train`; "
                  "sets model.vocab_size to its size");
  // No defaults of their own: the preset and the config file decide (--dump-config shows
  // the resolved values).
  app->add_option("--max-steps", max_steps, "optimizer steps (train.max_steps)");
  app->add_option("--seed", seed, "random seed: init, batch order (train.seed)");
  app->add_option("--batch-size", batch_size, "sequences per step (train.batch_size)");
  app->add_option("--lr", lr, "peak learning rate (train.lr)");
  app->add_option("--threads", threads, "intra-op threads, 0 = all (train.threads)");
  app->add_option("--precision", precision,
                  "fp32 or bf16: bfloat16 matrix products and activations with fp32 weights "
                  "(train.precision)");
  app->add_option("--device", device,
                  "cpu, cuda or cuda:N: the device the run computes on (train.device)");
  app->add_option("--max-len", max_len,
                  "context length in tokens, bytes for byte-level models (model.max_len)");
  app->add_option("--aib-impl", aib_impl,
                  "AIB scan: kernel (default) or reference (model.aib.impl)");
  app->add_option("--set", set, "override any key: section.key=value (repeatable)");
}

nn::Precision run_precision(const std::string& flag, const std::string& stored) {
  if (flag.empty()) return nn::parse_precision(stored);
  try {
    return nn::parse_precision(flag);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--precision: ") + e.what());
  }
}

c10::Device run_device(const std::string& flag, const std::string& stored) {
  if (flag.empty()) return util::require_device(stored, "train.device");
  return util::require_device(flag, "--device");
}

namespace {

// A count given as text: an integer, or a number in scientific notation that is one (1e9);
// anything else is an error naming the flag.
std::optional<int64_t> integer(const std::optional<std::string>& text, const char* flag) {
  if (!text) return std::nullopt;
  int64_t v = 0;
  if (const std::string why = read_integer(*text, v); !why.empty())
    throw std::invalid_argument(std::string(flag) + ": " + why);
  return v;
}

}  // namespace

std::vector<train::Override> ConfigFlags::overrides() const {
  if (!task.empty() && !data.empty())
    throw std::invalid_argument("--data does not apply with --task: task '" + task +
                                "' brings its own data");
  if (!task.empty() && !tokenizer.empty())
    throw std::invalid_argument("--tokenizer does not apply with --task: task '" + task +
                                "' brings its own token ids (docs/TASKS.md)");
  std::vector<train::Override> o;
  auto str = [&](const char* key, const std::string& v, const char* flag) {
    if (!v.empty()) o.emplace_back(key, v, flag);
  };
  auto num = [&](const char* key, const std::optional<std::string>& text, const char* flag) {
    if (const auto v = integer(text, flag)) o.emplace_back(key, *v, flag);
  };
  str("model.preset", model, "--model");
  str("model.size", size, "--size");
  str("data.source", data, "--data");
  str("data.task", task, "--task");
  str("data.dir", data_dir, "--data-dir");
  str("train.precision", precision, "--precision");
  str("train.device", device, "--device");
  str("model.aib.impl", aib_impl, "--aib-impl");
  if (!tokenizer.empty()) {
    const auto t = train::tokenizer_overrides(tokenizer);
    o.insert(o.end(), t.begin(), t.end());
  }
  num("train.max_steps", max_steps, "--max-steps");
  num("train.seed", seed, "--seed");
  num("train.batch_size", batch_size, "--batch-size");
  num("train.threads", threads, "--threads");
  num("model.max_len", max_len, "--max-len");
  if (lr) o.emplace_back("train.lr", *lr, "--lr");
  o.insert(o.end(), set.begin(), set.end());
  return o;
}

void harden(CLI::App* app) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("expected a value, got ''") : ""; },
      "", "");
  const CLI::Validator integer(
      [](std::string& v) -> std::string {
        int64_t n = 0;
        std::string why = read_integer(v, n);
        if (why.empty()) v = std::to_string(n);
        return why;
      },
      "", "");
  for (CLI::Option* opt : app->get_options()) {
    const std::string type = opt->get_type_name();
    if (type.empty()) continue;  // a flag
    opt->check(non_empty);
    if (type == "INT" || type == "UINT") opt->transform(integer);
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) harden(sub);
}

void check_outputs(const std::string& dir, const std::vector<std::string>& names,
                   bool overwrite) {
  util::check_path_text(dir, "--out");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw std::runtime_error("--out: '" + dir + "' exists and is not a folder");
  if (!util::run_files_in(dir).empty())
    throw std::runtime_error("--out: '" + dir + "' is a training run's folder; choose another");
  for (const auto& n : names) {
    util::check_replaceable((fs::path(dir) / n).string());
    if (!overwrite && fs::exists(fs::symlink_status(fs::path(dir) / n, ec)))
      throw std::runtime_error("--out: '" + (fs::path(dir) / n).string() +
                               "' exists; give --overwrite to replace it, or another folder");
  }
}

OutputError::OutputError(int e)
    : std::runtime_error(std::string("could not write standard output: ") + std::strerror(e)),
      error(e) {}

void write_stdout(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() ||
      std::fflush(stdout) != 0) {
    const int e = errno ? errno : EIO;
    std::clearerr(stdout);
    throw OutputError(e);
  }
}

namespace {

// 128 + SIGPIPE: the status a shell shows for a writer whose reader went away.
constexpr int kBrokenPipeStatus = 128 + SIGPIPE;

int report_output_error(int error) {
  if (error == EPIPE) return kBrokenPipeStatus;
  std::fprintf(stderr, "seqmix: error: could not write standard output: %s\n",
               std::strerror(error));
  return 1;
}

}  // namespace

int finish_stdout(int code) {
  errno = 0;
  std::cout.flush();
  const bool failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  int error = errno;
  // close() is where some file systems (NFS, a full quota) report a write that failed.
  const bool closed = std::fclose(stdout) == 0;
  if (!closed && !error) error = errno;
  // A descriptor that was closed before the program started (>&-) is no error by itself:
  // only output that was written and lost is.
  if (!failed && (closed || error == EBADF)) return code;
  return code == 0 ? report_output_error(error ? error : EIO) : code;
}

namespace {

bool key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// Where `name` stands as a whole word in `text` from `from` on (npos if nowhere).
size_t find_word(const std::string& text, const std::string& name, size_t from = 0) {
  for (size_t at = text.find(name, from); at != std::string::npos;
       at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    // "train.lr." is the start of a longer key, "train.lr." at a sentence's end is not.
    const bool longer = end < text.size() && key_char(text[end]) &&
                        !(text[end] == '.' && (end + 1 == text.size() || text[end + 1] == ' '));
    if ((at == 0 || !key_char(text[at - 1])) && !longer) return at;
  }
  return std::string::npos;
}

}  // namespace

std::string with_flags(std::string message) {
  // The library names its parameters in backquotes (`top_k`); a flag here is the same name
  // with dashes (--top-k), except these.
  static const std::pair<const char*, const char*> renamed[] = {
      {"out_dir", "--out"}, {"out_file", "--out"}, {"config_path", "--config"},
      {"models", "--run"}};
  for (size_t open = 0; (open = message.find('`', open)) != std::string::npos;) {
    const size_t close = message.find('`', open + 1);
    if (close == std::string::npos) break;
    const std::string name = message.substr(open + 1, close - open - 1);
    const bool identifier =
        !name.empty() && std::islower(static_cast<unsigned char>(name[0])) &&
        std::all_of(name.begin(), name.end(), [](char c) {
          return std::islower(static_cast<unsigned char>(c)) ||
                 std::isdigit(static_cast<unsigned char>(c)) || c == '_';
        });
    if (!identifier) {  // a command such as `seqmix export`, kept as it is
      open = close + 1;
      continue;
    }
    std::string flag = "--" + name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    for (const auto& [from, to] : renamed)
      if (name == from) flag = to;
    message.replace(open, close - open + 1, flag);
    open += flag.size();
  }
  // A configuration key: its first mention gets the flag, "train.lr (--lr)"; not one inside
  // a quoted text the user gave ("override 'train.lr=fast'", "'train.lr' must be").
  for (const auto& [key, flag] : train::key_flags()) {
    size_t at = find_word(message, key);
    while (at != std::string::npos &&
           ((at > 0 && message[at - 1] == '\'') ||
            (at + key.size() < message.size() && message[at + key.size()] == '=')))
      at = find_word(message, key, at + 1);
    if (at == std::string::npos) continue;
    const size_t end = at + key.size();
    if (message.compare(end, 3 + flag.size(), " (" + flag + ")") == 0) continue;
    message.insert(end, " (" + flag + ")");
  }
  return message;
}

int run_reporting_errors(const std::function<int()>& body) {
  try {
    return body();
  } catch (const OutputError& e) {
    return report_output_error(e.error);
  } catch (const train::Interrupted& e) {
    std::fprintf(stderr, "seqmix: %s\n", e.what());
    return 128 + e.signal;  // the shell's convention for "ended by signal N"
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "seqmix: error: out of memory; lower --batch-size or --max-len, or the "
                         "model size\n");
    return 1;
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // LibTorch's allocator reports an allocation it could not make as a failed enforce.
    if (what.find("alloc_cpu") != std::string::npos ||
        what.find("DefaultCPUAllocator") != std::string::npos) {
      std::fprintf(stderr, "seqmix: error: out of memory (%s); lower --batch-size or --max-len, "
                           "or the model size\n", what.substr(0, what.find('\n')).c_str());
      return 1;
    }
    std::fprintf(stderr, "seqmix: error: %s\n",
                 util::message_text(with_flags(what.substr(0, what.find('\n')))).c_str());
    return 1;
  } catch (const std::exception& e) {
    // A LibTorch error wrapped into another exception keeps its C++ backtrace in what():
    // the user gets the message alone.
    std::string what = e.what();
    if (const auto trace = what.find("\nException raised from "); trace != std::string::npos)
      what.resize(trace);
    std::fprintf(stderr, "seqmix: error: %s\n", util::message_text(with_flags(what)).c_str());
    return 1;
  }
}

namespace {

// The flags that only the launcher reads: its workers get the command line without them.
bool is_launcher_flag(const std::string& arg, bool& takes_value) {
  for (const char* f : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                        "--master-port"}) {
    const size_t n = std::strlen(f);
    if (arg == f) return takes_value = true;
    if (arg.compare(0, n, f) == 0 && arg.size() > n && arg[n] == '=') {
      takes_value = false;
      return true;
    }
  }
  return false;
}

std::chrono::milliseconds timeout_of(double seconds) {
  if (!(seconds >= 1 && seconds <= 86400))
    throw std::invalid_argument(fmt::format(
        "--dist-timeout: must be a number of seconds in [1, 86400], got {}", seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

void DistFlags::add_to(CLI::App* app) {
  const char* g = "Data-parallel training (torchrun's flags and variables)";
  app->add_option("--nproc-per-node", nproc_per_node,
                  "start this many worker processes on this machine (one machine: "
                  "MASTER_ADDR 127.0.0.1, a free port) and wait for them")
      ->group(g);
  app->add_option("--nnodes", nnodes, "machines in the job (default 1)")->group(g);
  app->add_option("--node-rank", node_rank, "this machine's index in [0, --nnodes)")->group(g);
  app->add_option("--master-addr", master_addr,
                  "address of the machine with --node-rank 0 (several machines)")
      ->group(g);
  app->add_option("--master-port", master_port,
                  "free TCP port on that machine for the rendezvous store")
      ->group(g);
  app->add_option("--dist-timeout", dist_timeout,
                  "seconds after which a lost or hung worker ends the run (every rank exits "
                  "non-zero naming it)")
      ->group(g);
}

int DistFlags::launch(char** argv, const std::function<void(int world_size)>& check) const {
  dist::LaunchOptions o;
  o.nproc_per_node = *nproc_per_node;
  o.nnodes = nnodes.value_or(1);
  o.node_rank = node_rank.value_or(0);
  o.master_addr = master_addr;
  o.master_port = master_port.value_or(0);
  o.timeout = timeout_of(dist_timeout);
  if (std::getenv("RANK") || std::getenv("WORLD_SIZE"))
    throw std::invalid_argument("--nproc-per-node: this process is already a worker (RANK / "
                                "WORLD_SIZE are set); start workers either with seqmix's "
                                "launcher or with torchrun, not both");
  o.validate();
  if (check) check(o.nproc_per_node * o.nnodes);
  std::vector<std::string> args;
  for (int i = 0; argv[i]; ++i) {
    bool value = false;
    if (i > 0 && is_launcher_flag(argv[i], value)) {
      if (value && argv[i + 1]) ++i;
      continue;
    }
    args.emplace_back(argv[i]);
  }
  return dist::launch_workers(o, args);
}

std::shared_ptr<dist::ProcessGroup> DistFlags::join() const {
  if (nnodes || node_rank || master_port || !master_addr.empty())
    throw std::invalid_argument("--nnodes, --node-rank, --master-addr and --master-port "
                                "configure the launcher: give --nproc-per-node too");
  const auto timeout = timeout_of(dist_timeout);
  const dist::LaunchEnv env = dist::LaunchEnv::from_environment();
  if (!env.distributed()) return nullptr;
  // Started by seqmix's launcher: end with it, even if it is killed outright (SIGKILL).
  if (const char* parent = std::getenv("SEQMIX_LAUNCHER_PID")) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (std::to_string(getppid()) != parent) raise(SIGTERM);  // it died before this line
  }
  return dist::ProcessGroup::create(env, timeout);
}

int DistFlags::run_worker(const std::function<int()>& body) {
  if (!std::getenv("WORLD_SIZE")) return body();
  const int code = finish_stdout(run_reporting_errors(body));
  std::fflush(stderr);
  _exit(code);
}

}  // namespace seqmix::cli
