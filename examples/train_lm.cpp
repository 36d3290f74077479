// train_lm: trains a small language model on a text file with seqmix, into a run folder.
//
//   train_lm TEXT_FILE RUN_FOLDER [STEPS] [section.key=value ...]
//
// The model reads bytes (a vocabulary of 256), trains on random crops of the first 90% of
// the file and is scored, in bits per character, on the last 10%. RUN_FOLDER then holds
// config.toml (the resolved configuration), metrics.jsonl (one JSON object per logged step
// or evaluation) and checkpoint.pt, which `generate` (generate.cpp) and the seqmix CLI
// (`seqmix eval RUN_FOLDER`, `seqmix train --out RUN_FOLDER --resume`) read.
//
// Any configuration key can be changed after the steps, as with the CLI's --set:
//   train_lm speech.txt runs/tf 200 model.preset=transformer train.lr=1e-3
// (`seqmix train --dump-config` prints every key with its default).
#include <seqmix/train/configuration/config.h>
#include <seqmix/train/trainer.h>
#include <seqmix/util/signals.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: train_lm TEXT_FILE RUN_FOLDER [STEPS] [section.key=value ...]\n"
    "  TEXT_FILE   text to learn (the last 10% of its bytes are held out for scoring)\n"
    "  RUN_FOLDER  new or empty folder for config.toml, metrics.jsonl and checkpoint.pt\n"
    "  STEPS       optimizer steps, default 20\n"
    "  key=value   any configuration key, e.g. model.preset=transformer train.lr=1e-3\n";

// A positive integer, all of `text`; false for anything else ("20x", "-3", "", overflow).
bool parse_positive(const std::string& text, int64_t& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && value > 0;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "train_lm: error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  namespace fs = std::filesystem;
  const std::string text_file = argv[1];
  const std::string run_folder = argv[2];

  // Check what we can before any work starts; the library checks everything again (and the
  // rest: the folder must not already hold a run, every value must be in range).
  std::error_code ec;
  if (!fs::is_regular_file(text_file, ec))
    return fail("TEXT_FILE '" + text_file + "' is not a regular file");
  int64_t steps = 20;
  int first_override = 3;
  if (argc > 3 && std::string(argv[3]).find('=') == std::string::npos) {
    if (!parse_positive(argv[3], steps))
      return fail(std::string("STEPS must be a positive integer, got '") + argv[3] + "'");
    first_override = 4;
  }

  // The configuration, resolved as the CLI resolves it: the preset's values first, then
  // these overrides in order (no TOML file here, hence ""). The tiny Weird-Net (two layers,
  // width 64, context 128 bytes) learns something in a few hundred steps on a CPU.
  // Values of the program's own are given typed; the command line's key=value texts are
  // parsed into their keys' types (Override in seqmix/train/configuration/config.h).
  std::vector<seqmix::train::Override> overrides;
  try {
    overrides = {
        {"model.preset", "weird-net"},
        {"model.size", "tiny"},
        // Absolute, so that the stored configuration still finds it from another working
        // directory.
        {"data.source", fs::absolute(text_file).string()},
        {"train.max_steps", steps},
        {"train.batch_size", int64_t{8}},
        // The presets warm up over 100 steps; a short run warms up over its first tenth.
        {"train.warmup_steps", std::min<int64_t>(100, steps / 10)},
        // Evaluate and checkpoint once, at the end (a long run would rather do it every few
        // hundred steps, so that an interrupted run loses little).
        {"train.eval_interval", int64_t{0}},
        {"train.checkpoint_interval", int64_t{0}},
        {"train.log_interval", std::max<int64_t>(1, steps / 10)},
    };
    // Throws, naming the override, for an unknown key or a value of another type.
    for (int i = first_override; i < argc; ++i) overrides.emplace_back(std::string(argv[i]));
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  try {
    // Throws, naming the key, for values out of range.
    const seqmix::train::RunConfig config = seqmix::train::resolve_config("", overrides);
    std::fprintf(stderr, "train_lm: %s/%s, %.2fM parameters, %lld steps on '%s'\n",
                 config.model.preset.c_str(), config.model.size.c_str(),
                 config.model.num_parameters() / 1e6,
                 static_cast<long long>(config.train.max_steps), text_file.c_str());

    // Ctrl-C then finishes the current step, writes a checkpoint and throws Interrupted;
    // `seqmix train --out RUN_FOLDER --resume` continues from there.
    seqmix::util::install_stop_signals();
    seqmix::train::TrainOptions options;
    options.out_dir = run_folder;
    const seqmix::train::TrainResult result = seqmix::train::train(config, options);

    std::printf("trained %lld steps in %.1f s: training loss %.3f nats, held-out %.3f bits "
                "per character\nrun folder: %s\n",
                static_cast<long long>(result.steps), result.seconds, result.final_train_loss,
                result.eval_bpc, run_folder.c_str());
    return 0;
  } catch (const seqmix::train::Interrupted& e) {
    std::fprintf(stderr, "train_lm: %s\n", e.what());
    return 128 + e.signal;  // the shell's convention for "ended by signal N"
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
