// seqmix plot: training and held-out curves of runs against the step, drawn by gnuplot.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "seqmix/train/reporting/plot.h"

namespace seqmix::cli {

Command add_plot(CLI::App& app) {
  auto o = std::make_shared<train::PlotOptions>();
  auto* cmd = app.add_subcommand(
      "plot", "draw training and held-out curves of runs against the step (gnuplot)");
  cmd->add_option("runs", o->runs, "run folders (each with metrics.jsonl)")->required();
  cmd->add_option("--metric", o->metric,
                  "bpc, loss, accuracy or lr (default: bpc for byte-level language models, "
                  "else loss)");
  cmd->add_option("--out", o->out,
                  "the picture, FILE.png or FILE.svg (default with one run: "
                  "RUN/plot_<metric>.png; required with several runs)");
  return {cmd, [o](char**) {
            const auto r = train::plot_runs(*o);
            fmt::print("{}\n", nlohmann::json{{"metric", r.metric}, {"out", r.path}}.dump());
            return 0;
          }};
}

}  // namespace seqmix::cli
