// seqmix info: the mixers, presets and sizes (models/catalog.h), and the BLAS in use.
#include <fmt/format.h>

#include "common.h"
#include "seqmix/models/catalog.h"
#include "seqmix/util/blas.h"
#include "seqmix/util/memory.h"

namespace seqmix::cli {

namespace {

int run_info() {
  fmt::print("{}", models::describe_catalog());
  fmt::print("\nBLAS: {}\n", util::blas_description());
  fmt::print("bf16 (train.precision = bf16): {}\n", util::onednn_description());
  fmt::print("Large-block pool: {}\n", util::large_block_pool_description());
  return 0;
}

}  // namespace

Command add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "list model presets with parameter counts");
  return {cmd, [](char**) { return run_info(); }};
}

}  // namespace seqmix::cli
