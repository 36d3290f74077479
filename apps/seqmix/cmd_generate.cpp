// seqmix generate: continue a prompt with a stored run's model, streaming the text to stdout.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "common.h"
#include "seqmix/generate/sampler.h"
#include "seqmix/nn/precision.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/util/threads.h"

namespace seqmix::cli {

namespace {

struct GenerateFlags {
  std::string run, prompt = "\n";
  int64_t max_new = 256, top_k = 0, seed = 0, threads = 0;
  double temperature = 0.8, top_p = 0.95;
  std::string precision;  // empty: the run's train.precision
  std::string device;     // empty: the run's train.device
};


int run_generate(const GenerateFlags& f, char** argv) {
  // Every option is checked before anything reaches stdout.
  generate::SamplingOptions o;
  o.temperature = f.temperature;
  o.top_k = f.top_k;
  o.top_p = f.top_p;
  generate::validate(o);
  if (f.seed < 0) throw std::invalid_argument("--seed must be >= 0, got " + std::to_string(f.seed));
  if (f.max_new < 0 || f.max_new > generate::kMaxNewTokens)
    throw std::invalid_argument("--max-new-tokens must be in [0, 1e9], got " +
                                std::to_string(f.max_new));
  util::check_threads(f.threads, "--threads");
  run_precision(f.precision, "fp32");  // the flags are checked before anything is loaded
  if (!f.device.empty()) run_device(f.device, "cpu");
  const int64_t threads = generate::generate_threads(f.threads);
  // libgomp reads its wait policy only when it is loaded: for more than one thread, run
  // again with OMP_WAIT_POLICY=passive (unless set) before anything is loaded or printed.
  util::reexec_with_passive_omp_wait(argv, threads);
  train::LoadedRun run = train::load_run(f.run);
  const nn::Precision precision = run_precision(f.precision, run.config.train.precision);
  run.model->to(run_device(f.device, run.config.train.device));
  util::configure_threads(threads);
  const nn::AutocastGuard autocast(precision);
  // The prompt goes out with the first new text, so that a model that cannot generate
  // (non-finite outputs) prints nothing on stdout before its error.
  bool started = false;
  // Bytes, not C strings: a byte-level model may generate NUL.
  auto emit = [&](const std::string& t) {
    if (!started) write_stdout(f.prompt);
    started = true;
    write_stdout(t);
  };
  const std::string note = generate::prompt_note(
      run.model, static_cast<int64_t>(run.tokenizer.encode(f.prompt).size()),
      run.tokenizer.is_bytes() ? "bytes" : "tokens");
  if (!note.empty()) fmt::print(stderr, "seqmix generate: note: {}\n", note);
  generate::GenerationStats stats;
  try {
    generate::generate_text(run.model, run.tokenizer, f.prompt, f.max_new, o,
                            static_cast<uint64_t>(f.seed), emit, &stats);
  } catch (const OutputError&) {
    throw;
  } catch (const std::exception& e) {
    if (started) std::fputc('\n', stdout);
    throw std::runtime_error("generate: '" + f.run + "': " + e.what());
  }
  if (!started) emit("");
  write_stdout("\n");
  fmt::print(stderr, "seqmix generate: {}\n", generate::describe(stats));
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  auto* cmd = app.add_subcommand("generate", "generate text from a trained model");
  cmd->add_option("run", f->run, "run folder or checkpoint file")->required();
  cmd->add_option("--prompt", f->prompt, "text to continue");
  cmd->add_option("--max-new-tokens", f->max_new,
                  "tokens to generate (bytes for byte-level models), at most 1e9");
  cmd->add_option("--temperature", f->temperature, "sampling temperature (0 = greedy)");
  cmd->add_option("--top-k", f->top_k, "keep the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", f->top_p, "nucleus sampling threshold in (0, 1]");
  cmd->add_option("--seed", f->seed, "sampling seed");
  cmd->add_option("--precision", f->precision,
                  "fp32 or bf16 (default: the run's train.precision)");
  cmd->add_option("--device", f->device,
                  "cpu, cuda or cuda:N (default: the run's train.device)");
  cmd->add_option("--threads", f->threads,
                  "intra-op threads (0 = 1: a token's work is too small to share; more than 1 "
                  "run with OMP_WAIT_POLICY=passive unless it is set)");
  return {cmd, [f](char** argv) { return run_generate(*f, argv); }};
}

}  // namespace seqmix::cli
