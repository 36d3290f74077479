#pragma once
// What the subcommands of the seqmix command line share: how a subcommand is registered, the
// flags that resolve a run configuration, the checks every option gets, and how a failure
// becomes a message and an exit status. No model, data or training logic lives in apps/:
// every command parses its flags and calls the library.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

// The integer a user wrote, plainly or as an exact power-of-ten form such as 1e9, into
// `value`; returns "" or why `text` is not one that fits in 64 bits.
std::string read_integer(const std::string& text, int64_t& value);

// Options shared by the commands that resolve a configuration. Every flag that was given
// becomes a `section.key=value` override, so the configuration's own checks
// (RunConfig::validate) judge it exactly as they judge --set and TOML: a value that is out of
// range is an error naming the flag, never a silent default.
struct ConfigFlags {
  std::string config_path, model, size, data, data_dir, aib_impl, tokenizer, task;
  // Counts are read as text so that 1e9 means 10^9, as a user writes it; integer() checks it.
  std::optional<std::string> max_steps, seed, batch_size, threads, max_len;
  std::optional<double> lr;
  std::vector<std::string> set;

  void add_to(CLI::App* app);
  // The overrides, flags first and --set last (so --set has the last word); a tokenizer is
  // read here, to set model.vocab_size to its size.
  std::vector<std::string> overrides() const;
};

// Every option of every command: a value given must not be empty (CLI11 would turn '' into
// the option's default), and an integer must be one that fits in 64 bits (CLI11 would clamp
// 9223372036854775808) -- written plainly or as an exact power-of-ten form such as 1e9.
void harden(CLI::App* app);

// Output files a command writes into a folder that may already hold some: refused unless
// --overwrite says to replace them, and never into a training run's folder.
void check_outputs(const std::string& dir, const std::vector<std::string>& names,
                   bool overwrite);

// Runs `body`, turning what it throws into one line on stderr and an exit status: a training
// run stopped by a signal exits with 128 + the signal (the shell's convention), anything else
// with 1, out of memory with a hint at what to lower.
int run_reporting_errors(const std::function<int()>& body);

}  // namespace seqmix::cli
