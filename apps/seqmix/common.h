#pragma once
// What the subcommands of the seqmix command line share: how a subcommand is registered, the
// flags that resolve a run configuration, the checks every option gets, and how a failure
// becomes a message and an exit status. No model, data or training logic lives in apps/:
// every command parses its flags and calls the library.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "seqmix/nn/precision.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/util/device.h"

namespace seqmix::dist {
class ProcessGroup;
}

namespace seqmix::cli {

// A registered subcommand: `app` says (parsed()) whether the user chose it, `run` does it
// and returns the exit status. `argv` is the program's, for commands that re-execute it.
struct Command {
  CLI::App* app = nullptr;
  std::function<int(char** argv)> run;
};

// One per cmd_*.cpp, in the order `seqmix --help` lists them.
Command add_train(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_info(CLI::App& app);
Command add_tokenizer(CLI::App& app);
Command add_data(CLI::App& app);
Command add_compare(CLI::App& app);
Command add_plot(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_export(CLI::App& app);
Command add_import(CLI::App& app);

extern const char* const kDataDirHelp;

// A library error as the command line reports it: each configuration key named gets the
// flag that sets it ("train.lr" -> "train.lr (--lr)", first mention), and the parameters the
// library names in backquotes become their flags ("`top_k`" -> "--top-k", "`out_dir`" ->
// "--out").
std::string with_flags(std::string message);

// The integer a user wrote, plainly or as an exact power-of-ten form such as 1e9, into
// `value`; returns "" or why `text` is not one that fits in 64 bits.
std::string read_integer(const std::string& text, int64_t& value);

// The precision of eval and generate: --precision (`flag`) when given, else the run's stored
// train.precision. @throws std::invalid_argument naming --precision for a bad flag.
nn::Precision run_precision(const std::string& flag, const std::string& stored);

// The device of eval, generate and bench: --device (`flag`) when given, else `stored` (a
// run's train.device), checked against this machine (util::require_device).
// @throws std::invalid_argument naming --device (or train.device) for a bad or absent device.
c10::Device run_device(const std::string& flag, const std::string& stored);

// Options shared by the commands that resolve a configuration. Every flag that was given
// becomes a typed override of its key, so the configuration's own checks
// (RunConfig::validate) judge it exactly as they judge --set and TOML: a value that is out of
// range is an error naming the key and the flag, never a silent default.
struct ConfigFlags {
  std::string config_path, model, size, data, data_dir, aib_impl, tokenizer, task, precision,
      device;
  // Counts are read as text so that 1e9 means 10^9, as a user writes it; integer() checks it.
  std::optional<std::string> max_steps, seed, batch_size, threads, max_len;
  std::optional<double> lr;
  std::vector<std::string> set;

  void add_to(CLI::App* app);
  // The overrides, flags first and --set last (so --set has the last word); a tokenizer is
  // read here, to set model.vocab_size to its size.
  std::vector<train::Override> overrides() const;
};

// Data-parallel launch, for the commands that train (train, compare): torchrun's flags for
// the launcher, --dist-timeout for every worker (started by it, by torchrun, or by hand with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
struct DistFlags {
  std::optional<int> nproc_per_node, nnodes, node_rank, master_port;
  std::string master_addr;
  double dist_timeout = 60;

  void add_to(CLI::App* app);
  // --nproc-per-node was given: this process starts the workers (launch()) and trains nothing.
  bool launcher() const { return nproc_per_node.has_value(); }
  // Starts this machine's workers with `argv` less the launcher's flags; their exit status.
  // `check` (given the world size) runs first: what every worker would refuse is refused
  // before any starts.
  int launch(char** argv, const std::function<void(int world_size)>& check = {}) const;
  // This process's group when it is a worker (the launch variables are set), else null.
  // @throws std::invalid_argument for launcher flags without --nproc-per-node, bad variables.
  std::shared_ptr<dist::ProcessGroup> join() const;
  // Runs a worker's `body`: its failure ends the process at once (c10d's threads would only
  // wait for collectives that time out); not a worker: runs `body` as it is.
  static int run_worker(const std::function<int()>& body);
};

// Every option of every command: a value given must not be empty (CLI11 would turn '' into
// the option's default), and an integer must be one that fits in 64 bits (CLI11 would clamp
// 9223372036854775808) -- written plainly or as an exact power-of-ten form such as 1e9.
void harden(CLI::App* app);

// Output files a command writes into a folder that may already hold some: refused unless
// --overwrite says to replace them, and never into a training run's folder.
void check_outputs(const std::string& dir, const std::vector<std::string>& names,
                   bool overwrite);

// Standard output carries results (`seqmix eval run > result.json`), so a write that fails
// -- a full disk, /dev/full, a closed descriptor, a reader that went away -- fails the command.
// write_stdout writes `bytes` as they are (NUL bytes included) and flushes them; it throws
// OutputError when they could not be written.
struct OutputError : std::runtime_error {
  explicit OutputError(int error);
  int error;  // the errno of the failed write
};
void write_stdout(std::string_view bytes);

// Flushes and closes stdout before the process exits with `code`: returns `code` when
// everything written reached it; else reports the failure (quietly for a closed pipe, as
// `seqmix generate | head` is no error of the user's) and returns a non-zero status.
int finish_stdout(int code);

// Runs `body`, turning what it throws into one line on stderr and an exit status: a training
// run stopped by a signal exits with 128 + the signal (the shell's convention), anything else
// with 1, out of memory with a hint at what to lower.
int run_reporting_errors(const std::function<int()>& body);

}  // namespace seqmix::cli
