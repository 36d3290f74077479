// seqmix command-line tool: wires the subcommands (cmd_*.cpp) together; each parses its own
// flags and calls libseqmix.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <vector>

#include "common.h"
#include "seqmix/util/memory.h"

int main(int argc, char** argv) {
  namespace cli = seqmix::cli;
  // Shapes vary between training steps (padded batches of varying length): bounded. The
  // benchmarks switch to kRepeating (their shapes repeat exactly, case by case).
  try {
    seqmix::util::set_heap_policy(seqmix::util::HeapPolicy::kBounded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqmix: error: %s\n", e.what());
    return 1;
  }
  // Past a file-size limit (ulimit -f) a write should fail like one on a full disk, with an
  // error the checkpoint code reports, not kill the process mid-file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "seqmix: sub-quadratic sequence models (AIB/Weird attention, the Extractor, Transformer) -- "
      "train, evaluate, compare, generate, benchmark"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "seqmix " SEQMIX_VERSION);
  // --help shows each option's default (options whose default comes from the preset or the
  // config file have none of their own and say so). Set before the subcommands are added,
  // which copy it.
  app.option_defaults()->always_capture_default();

  const std::vector<cli::Command> commands = {
      cli::add_train(app),     cli::add_eval(app),    cli::add_generate(app),
      cli::add_info(app),      cli::add_tokenizer(app), cli::add_data(app),
      cli::add_compare(app),   cli::add_plot(app),    cli::add_bench(app),
      cli::add_export(app),    cli::add_import(app)};
  cli::harden(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::finish_stdout(app.exit(e));
  }
  for (const auto& c : commands)
    if (c.app->parsed())
      return cli::finish_stdout(cli::run_reporting_errors([&] { return c.run(argv); }));
  std::cout << app.help();  // bare `seqmix`: what it can do
  return cli::finish_stdout(0);
}
