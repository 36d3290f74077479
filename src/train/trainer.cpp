#include "seqmix/train/trainer.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>
#include <filesystem>
#include <optional>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tasks.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/dist/reducer.h"
#include "seqmix/nn/precision.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/classify.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/objective.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/schedule.h"
#include "seqmix/util/blas.h"
#include "seqmix/util/files.h"
#include "seqmix/util/progress.h"
#include "seqmix/util/rng.h"
#include "seqmix/util/run_folder.h"
#include "seqmix/util/signals.h"
#include "seqmix/util/device.h"
#include "seqmix/util/threads.h"

namespace seqmix::train {

namespace fs = std::filesystem;

std::string LossSpikeWatch::check(int64_t step, double loss) {
  std::string warning;
  if (!warned_ && recent_.size() >= kMinSteps) {
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    const double median = v[v.size() / 2];
    if (median > 0 && loss > 5 * median) {
      warned_ = true;
      warning = fmt::format(
          "step {}: the training loss {:.4g} is {:.1f}x the median of the last {} steps "
          "({:.4g}); training may be diverging (lower train.lr or raise train.warmup_steps)",
          step, loss, loss / median, recent_.size(), median);
    }
  }
  recent_.push_back(loss);
  if (recent_.size() > kWindow) recent_.pop_front();
  return warning;
}

// Decay only weight matrices of Linear/Embedding layers; biases, norms, positional
// embeddings and the AIB distance parameters w are left alone (as nanoGPT/GPT-2 do).
std::unique_ptr<torch::optim::AdamW> make_optimizer(models::SequenceModel& model,
                                                    const TrainConfig& t) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const std::string& k = p.key();
    const bool is_weight = k.size() >= 6 && k.compare(k.size() - 6, 6, "weight") == 0;
    (is_weight && p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  }
  auto opts = torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(t.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(opts).weight_decay(t.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(opts).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(groups, opts);
}

namespace {

using LogFn = std::function<void(const nlohmann::json&)>;
using SayFn = std::function<void(const std::string&)>;

// The data a run learns from and how it is scored there: next-token prediction on a corpus
// or a labelled task (the loss itself is objective.h's, shared with evaluation). The loop in
// train() (schedule, clipping, logging, checkpoints) is the same for both.
struct TrainingPlan {
  std::string description;  ///< the data, for the start line
  std::string fingerprint;  ///< a hash of every token and label, compared between ranks
  std::string data_sizes;   ///< e.g. "90000 train and 10000 held-out bytes", for messages
  std::string batch_shape;  ///< e.g. "32 x 256 bytes"
  std::string unit;         ///< what the throughput counts: tokens or examples
  int64_t units_per_step = 0;
  bool train_bpc = false;   ///< training lines carry bpc (byte-level language models)
  std::function<BatchLoss(int64_t step)> step;  ///< the mean loss of the step's batch
  std::function<void(int64_t step, bool final)> held_out;
};

// FNV-1a over token ids: enough to tell two ranks' data apart (not a cryptographic hash).
struct Fnv1a {
  uint64_t h = 1469598103934665603ull;
  void add(const std::vector<int32_t>& v) {
    add_word(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) add_word(static_cast<uint32_t>(x));
  }
  void add_word(uint64_t x) {
    for (int i = 0; i < 8; ++i, x >>= 8) h = (h ^ (x & 0xff)) * 1099511628211ull;
  }
  std::string hex() const { return fmt::format("{:016x}", h); }
};

// A resumed run must see the data it started on: a corpus that grew moves the 90/10 split,
// so held-out text would be trained on and the held-out curve change sets mid-run.
void check_same_data(const CheckpointFile& resumed, const TrainingPlan& plan, bool allowed) {
  const DataFingerprint& then = resumed.data_fingerprint();
  if (then.hash.empty() || then.hash == plan.fingerprint) return;  // older checkpoints: none
  if (allowed) return;
  throw std::runtime_error(fmt::format(
      "`resume`: the data differs from the data this run was trained on: the checkpoint's was "
      "{} (hash {}), the data now is {} (hash {}); its train/held-out split would change "
      "mid-run. Restore the data, start a new run, or give `allow_data_change` to go on "
      "with the new data",
      then.sizes, then.hash, plan.data_sizes, plan.fingerprint));
}

// Which part of a global batch of `n` this process takes: rank r of W gets rows
// [r n / W, (r + 1) n / W); n is a multiple of W (checked at start-up).
struct Shard {
  int rank = 0, world = 1;
  int64_t begin(int64_t n) const { return n / world * rank; }
  int64_t size(int64_t n) const { return n / world; }
};

// The final evaluation scores whole splits (minutes at the larger sizes): it is announced
// and gets its own progress bar, which `on_progress` drives. Ranks other than 0 of a
// data-parallel run show none (`visible` false).
std::unique_ptr<util::Progress> final_evaluation_bar(int64_t total, const std::string& unit,
                                                     const std::string& what, const SayFn& say,
                                                     EvalProgressFn& on_progress,
                                                     bool visible = true) {
  if (!visible) return nullptr;
  say(fmt::format("final evaluation: {} {} {}", total, unit, what));
  util::ProgressOptions po;
  po.unit = unit;
  po.plain_interval_s = 30;  // without a terminal, a line every 30 s at most
  auto bar = std::make_unique<util::Progress>("eval", total, 0, po);
  on_progress = [b = bar.get()](int64_t done, int64_t) { b->update(done, ""); };
  return bar;
}

TrainingPlan language_model_plan(const RunConfig& config, models::SequenceModel& model,
                                 const data::Tokenizer& tokenizer, const LogFn& log,
                                 const SayFn& say, TrainResult& result,
                                 dist::ProcessGroup* group) {
  auto corpus = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::build(
      data::ByteCorpus::load(config.data.source, config.data.dir, config.data.eval_split),
      tokenizer));
  const auto& t = config.train;
  const int64_t T = config.model.max_len, B = t.batch_size;
  TrainingPlan o;
  o.description = corpus->description;
  Fnv1a hash;
  hash.add(corpus->train);
  hash.add(corpus->eval);
  o.fingerprint = hash.hex();
  o.data_sizes = fmt::format("{} train and {} held-out {}", corpus->train.size(),
                             corpus->eval.size(), tokenizer.is_bytes() ? "bytes" : "tokens");
  o.batch_shape = fmt::format("{} x {} {}", B, T, tokenizer.is_bytes() ? "bytes" : "tokens");
  o.unit = "tokens";
  o.units_per_step = B * T;
  o.train_bpc = tokenizer.is_bytes();
  const Shard shard = group ? Shard{group->rank(), group->world_size()} : Shard{};
  o.step = [corpus, &model, &t, B, T, shard](int64_t step) {
    // The whole global batch is drawn on every rank (it is cheap) and each keeps its rows, so
    // the batches do not depend on the number of processes.
    at::Tensor batch = data::sample_batch(corpus->train, B, T, static_cast<uint64_t>(t.seed), step);
    if (shard.world > 1) batch = batch.narrow(0, shard.begin(B), shard.size(B));
    return language_model_loss(model, batch);
  };
  const std::string split = config.data.eval_split;  // the held-out split: valid or test
  o.held_out = [corpus, &model, &tokenizer, &t, B, split, log, say, &result, group](
                   int64_t step, bool final) {
    // The final evaluation scores the whole split (minutes at the larger sizes): announce it
    // and give it its own progress bar.
    std::unique_ptr<util::Progress> bar;
    EvalProgressFn on_progress;
    if (final) {
      const std::string unit = tokenizer.is_bytes() ? "bytes" : "tokens";
      bar = final_evaluation_bar(evaluated_tokens(corpus->eval, 0), unit,
                                 "of the held-out split (" + split + ")", say, on_progress,
                                 !group || group->rank() == 0);
    }
    const EvalResult r = evaluate(model, corpus->eval, tokenizer, B,
                                  final ? 0 : t.eval_max_bytes, on_progress, group);
    if (bar) bar->finish();
    log({{"step", step},
         {"split", split},
         {"loss", r.loss},
         {"perplexity", r.perplexity},
         {"bpc", r.bpc},
         {"tokens", r.tokens},
         {"bytes", r.bytes},
         {"final", final},
         {"seconds", r.seconds}});
    say(tokenizer.is_bytes()
            ? fmt::format("step {}: held-out bpc {:.4f} over {} bytes{}", step, r.bpc, r.tokens,
                          final ? " (whole split)" : "")
            : fmt::format("step {}: held-out perplexity {:.2f} (bpc {:.4f}) over {} tokens{}",
                          step, r.perplexity, r.bpc, r.tokens, final ? " (whole split)" : ""));
    result.eval_bpc = r.bpc;
    result.eval_loss = r.loss;
    result.eval_perplexity = r.perplexity;
  };
  return o;
}

TrainingPlan classification_plan(const RunConfig& config, models::SequenceModel& model,
                                 const LogFn& log, const SayFn& say, TrainResult& result,
                                 dist::ProcessGroup* group) {
  auto task = std::make_shared<const data::TaskData>(data::load_task(task_spec(config)));
  const auto& t = config.train;
  const int64_t B = t.batch_size, T = config.model.max_len;
  auto order = std::make_shared<EpochOrder>(static_cast<int64_t>(task->splits.train.size()), B,
                                            static_cast<uint64_t>(t.seed));
  TrainingPlan o;
  o.description = task->description;
  Fnv1a hash;
  for (const auto* split : {&task->splits.train, &task->splits.valid, &task->splits.test})
    for (const auto& e : *split) {
      hash.add(e.tokens);
      hash.add(e.tokens_b);
      hash.add_word(static_cast<uint32_t>(e.label));
    }
  o.fingerprint = hash.hex();
  o.data_sizes = fmt::format("{} train, {} valid and {} test examples", task->splits.train.size(),
                             task->splits.valid.size(), task->splits.test.size());
  o.batch_shape = fmt::format("{} examples of <= {} tokens{}", B, T,
                              task->info.pair ? " (pairs)" : "");
  o.unit = "examples";
  o.units_per_step = B;
  const int64_t pad_multiple = config.data.pad_to_multiple;
  const Shard shard = group ? Shard{group->rank(), group->world_size()} : Shard{};
  o.step = [task, order, &model, T, pad_multiple, shard](int64_t step) {
    std::vector<const data::LabelledSequence*> examples;
    const std::vector<int64_t> all = order->batch(step);
    const auto n = static_cast<int64_t>(all.size());
    for (int64_t k = shard.begin(n); k < shard.begin(n) + shard.size(n); ++k)
      examples.push_back(&task->splits.train[static_cast<size_t>(all[static_cast<size_t>(k)])]);
    return classification_loss(model, collate(examples, T, pad_multiple));
  };
  // Periodic evaluations score the validation split; the final one also the test split and
  // as many training examples as the test split has (train vs test accuracy, aib-net
  // Table VI), the first ones of the training split.
  o.held_out = [task, &model, B, pad_multiple, log, say, &result, group](int64_t step,
                                                                         bool final) {
    auto score = [&](const char* name, const std::vector<data::LabelledSequence>& split,
                     int64_t max_examples) {
      if (split.empty()) return AccuracyResult{};
      std::unique_ptr<util::Progress> bar;
      EvalProgressFn on_progress;
      const auto size = static_cast<int64_t>(split.size());
      if (final)
        bar = final_evaluation_bar(max_examples > 0 ? std::min(max_examples, size) : size,
                                   "examples", std::string("of the ") + name + " split", say,
                                   on_progress, !group || group->rank() == 0);
      const AccuracyResult r = evaluate_classifier(model, split, B, max_examples, pad_multiple,
                                                   on_progress, group);
      if (bar) bar->finish();
      log({{"step", step},
           {"split", name},
           {"loss", r.loss},
           {"accuracy", r.accuracy},
           {"majority", r.majority},
           {"examples", r.examples},
           {"final", final},
           {"seconds", r.seconds}});
      say(fmt::format("step {}: {} accuracy {:.2f}% (loss {:.4f}) over {} examples; majority "
                      "class {:.2f}%",
                      step, name, 100.0 * r.accuracy, r.loss, r.examples, 100.0 * r.majority));
      return r;
    };
    const AccuracyResult v = score("valid", task->splits.valid, 0);
    result.eval_loss = v.loss;
    result.eval_accuracy = v.accuracy;
    if (!final) return;
    const AccuracyResult te = score("test", task->splits.test, 0);
    // "train_eval": the training split scored in eval mode, distinct from training lines.
    const AccuracyResult tr = score(
        "train_eval", task->splits.train,
        std::max<int64_t>(1, static_cast<int64_t>(task->splits.test.size())));
    result.test_loss = te.loss;
    result.test_accuracy = te.accuracy;
    result.test_majority = te.majority;
    result.train_accuracy = tr.accuracy;
  };
  return o;
}

// Where a data-parallel rank other than 0 sends its progress display.
std::FILE* dev_null() {
  static std::FILE* f = std::fopen("/dev/null", "w");
  return f;
}

// Empty if the step's loss and every gradient are finite; otherwise what is not, naming the
// first parameter (in registration order) whose gradient has a NaN or an infinity.
std::string nonfinite(double loss, models::SequenceModel& model) {
  if (!std::isfinite(loss)) return fmt::format("the training loss is {}", loss);
  // One flag per gradient, read back once (on a GPU each read is a synchronisation); the
  // parameter is looked for only when some gradient is not finite.
  std::vector<at::Tensor> finite;
  for (const auto& p : model->parameters())
    if (p.grad().defined()) finite.push_back(at::isfinite(p.grad()).all());
  if (finite.empty() || at::stack(finite).all().item<bool>()) return {};
  for (const auto& p : model->named_parameters()) {
    const at::Tensor& g = p.value().grad();
    if (g.defined() && !at::isfinite(g).all().item<bool>())
      return fmt::format("the gradient of parameter '{}' is not finite", p.key());
  }
  return {};
}

// The gradient norm of each part of the model, before clipping: "tok_emb", "blocks.0",
// "blocks.1", ..., "norm_f", "cls_head" (a parameter's name up to its block index). Shows
// where the gradient reaches and where it vanishes, e.g. in the lower blocks of a deep stack.
nlohmann::json grad_norms_by_block(models::SequenceModel& model) {
  std::vector<std::pair<std::string, double>> sums;  // registration order
  for (const auto& p : model->named_parameters()) {
    const at::Tensor& g = p.value().grad();
    if (!g.defined()) continue;
    const std::string& name = p.key();
    size_t cut = name.find('.');
    if (cut != std::string::npos && name.compare(0, cut, "blocks") == 0)
      cut = name.find('.', cut + 1);
    std::string part = name.substr(0, cut);
    // The norm in the gradient's dtype (ATen accumulates it in float), squared in double: no
    // double copy of a large gradient (the Extractor's lag matrices reach gigabytes).
    const double n = g.norm().item<double>();
    const double sq = n * n;
    if (sums.empty() || sums.back().first != part)
      sums.emplace_back(std::move(part), sq);
    else
      sums.back().second += sq;
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [part, sq] : sums) out[part] = std::sqrt(sq);
  return out;
}

// The run folder's files while a run writes them (see train()'s contract in trainer.h).
// A fresh run in a folder that held no run writes config.toml and metrics.jsonl directly and
// removes them if it fails before its first checkpoint; an overwriting run writes its metrics
// under a hidden name and replaces the old run's files only with its first checkpoint; a
// resumed run rewrites config.toml only with a new checkpoint.
class RunFiles {
 public:
  /// `writer` false: a data-parallel rank other than 0, which writes nothing in the folder.
  RunFiles(fs::path out, bool created_dir, bool overwrite, bool writer = true)
      : out_(std::move(out)), created_dir_(created_dir), overwrite_(overwrite), writer_(writer) {}
  bool writer() const { return writer_; }
  // The folder stays locked as long as this run owns it.
  void keep_lock(std::shared_ptr<util::FolderLock> lock) { lock_ = std::move(lock); }
  fs::path metrics_path() const {
    return overwrite_ && !promoted_ ? out_ / ".metrics.jsonl.overwrite" : out_ / "metrics.jsonl";
  }
  // Files this run wrote that must go if it fails before a checkpoint.
  void created(const fs::path& p) { created_.push_back(p); }
  // After a checkpoint: the folder now holds this run, described by `config_toml`.
  void promote(const std::string& config_toml, const data::Tokenizer& tokenizer) {
    if (!writer_) {
      promoted_ = true;
      return;
    }
    util::write_file_atomic((out_ / "config.toml").string(), config_toml);
    // A copy next to the run for SentencePiece's own tools; seqmix reads the checkpoint's.
    if (!tokenizer.is_bytes()) tokenizer.save((out_ / "tokenizer.model").string());
    if (!promoted_ && overwrite_) {
      std::error_code ec;
      if (tokenizer.is_bytes()) fs::remove(out_ / "tokenizer.model", ec);
      // The open metrics stream follows the file through the rename.
      fs::rename(out_ / ".metrics.jsonl.overwrite", out_ / "metrics.jsonl");
    }
    promoted_ = true;
  }
  bool promoted() const { return promoted_; }
  // The run failed before its first checkpoint: leave the folder as it was found.
  void abandon() noexcept {
    if (promoted_ || !writer_) return;
    std::error_code ec;
    for (const auto& p : created_) fs::remove(p, ec);
    if (created_dir_) fs::remove(out_, ec);  // only if empty
  }

 private:
  fs::path out_;
  bool created_dir_, overwrite_, writer_;
  bool promoted_ = false;
  std::shared_ptr<util::FolderLock> lock_;
  std::vector<fs::path> created_;
};

// The figures of a finished run, read back from its metrics (a resume that has nothing to do).
TrainResult finished_result(const fs::path& metrics_path, int64_t steps, double seconds) {
  TrainResult r;
  r.steps = steps;
  r.seconds = seconds;
  for (const auto& line : read_metrics(metrics_path.string())) {
    const std::string split = line.value("split", "");
    if (split == "train" && line.contains("loss") && line["loss"].is_number())
      r.final_train_loss = line["loss"].get<double>();
    if (!line.value("final", false)) continue;
    auto num = [&](const char* k) { return line.contains(k) && line[k].is_number() ? line[k].get<double>() : 0.0; };
    if (split == "test") {
      r.test_loss = num("loss");
      r.test_accuracy = num("accuracy");
      r.test_majority = num("majority");
    } else if (split == "train_eval") {
      r.train_accuracy = num("accuracy");
    } else {  // the held-out split a language model or classifier is scored on
      r.eval_loss = num("loss");
      r.eval_bpc = num("bpc");
      r.eval_perplexity = num("perplexity");
      r.eval_accuracy = num("accuracy");
    }
  }
  return r;
}

// The first parameter (in registration order) holding a NaN or an infinity, or "".
std::string nonfinite_parameter(models::SequenceModel& model) {
  for (const auto& p : model->named_parameters())
    if (!at::isfinite(p.value()).all().item<bool>()) return p.key();
  return {};
}

// The device a run (or this data-parallel worker) trains on. A worker of a CUDA run takes
// its own GPU, cuda:LOCAL_RANK, as torchrun's scripts do; "cuda:N" puts every worker of
// the machine on GPU N (workers sharing a GPU, which NCCL refuses, reduce through Gloo).
c10::Device training_device(const std::string& name, dist::ProcessGroup* group) {
  c10::Device device = util::require_device(name, "train.device");
  if (!group || !device.is_cuda()) return device;
  if (name == "cuda") {
    const auto count = static_cast<int>(torch::cuda::device_count());
    const int local = group->env().local_rank;
    if (local >= count)
      throw std::invalid_argument(fmt::format(
          "train.device = 'cuda' gives each worker its own GPU (cuda:LOCAL_RANK), but LOCAL_RANK "
          "is {} and this machine has {} CUDA device{}; start at most {} worker{} here "
          "(--nproc-per-node), or name one GPU (train.device = 'cuda:0') for the workers to "
          "share",
          local, count, count == 1 ? "" : "s", count, count == 1 ? "" : "s"));
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local));
  }
  // NCCL needs a GPU per worker: the workers of a machine that share one use Gloo.
  group->use_device(device, name == "cuda" || group->env().local_world_size == 1);
  return device;
}

// One run in its folder. It lives in train_in_folder's frame from set-up to the end of the
// loop: the data plan's callbacks hold references to its members.
struct Run {
  Run(const TrainOptions& options, RunFiles& files, fs::path ckpt_path,
      const std::function<double()>& run_seconds)
      : options(options),
        files(files),
        ckpt_path(std::move(ckpt_path)),
        out(this->ckpt_path.parent_path()),
        run_seconds(run_seconds) {}
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const TrainOptions& options;
  RunFiles& files;
  const fs::path ckpt_path, out;
  const std::function<double()>& run_seconds;

  // resolve_against_checkpoint: what the run trains.
  RunConfig config;
  std::shared_ptr<CheckpointFile> resumed;  // opened once: configuration, tokenizer, state
  int64_t stored_max_steps = 0;
  std::vector<std::string> notes;  // said once the progress display exists

  // set_up: what it trains with.
  data::Tokenizer tokenizer = data::Tokenizer::bytes();
  bool task = false;  // a classification task, else language modelling
  dist::ProcessGroup* group = nullptr;
  bool writer = true;  // rank 0: writes the run folder
  int64_t threads = 0;
  c10::Device device{c10::kCPU};  // train.device; a data-parallel CUDA worker's own GPU
  models::SequenceModel model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
  int64_t start = 0;  // the step the loop starts from
  TrainingPlan plan;
  nn::Precision precision = nn::Precision::fp32;
  std::unique_ptr<MetricsWriter> metrics;  // rank 0 only
  std::unique_ptr<util::Progress> progress;
  TrainResult result;  // the plan's held-out scores land here

  // A metrics line (nothing on a rank other than 0 of a data-parallel run), with the run's time.
  LogFn log = [this](nlohmann::json line) {
    if (!metrics) return;
    line["time_s"] = run_seconds();
    metrics->write(line);
  };
  SayFn say = [this](const std::string& line) { progress->message(line); };
};

// The configuration the run trains: the requested one; resuming, the checkpoint's, with only
// what may change on resume taken from the request, and notes on what that changes.
void resolve_against_checkpoint(Run& run, const RunConfig& requested) {
  const TrainOptions& options = run.options;
  const fs::path& ckpt_path = run.ckpt_path;
  RunConfig& config = run.config;
  std::vector<std::string>& notes = run.notes;
  std::shared_ptr<CheckpointFile>& resumed = run.resumed;
  int64_t& stored_max_steps = run.stored_max_steps;
  config = requested;
  if (options.resume) {
    resumed = options.checkpoint;
    if (!resumed) {
      if (!fs::is_regular_file(ckpt_path))
        throw std::runtime_error("`resume`: '" + ckpt_path.string() + "' does not exist");
      resumed = std::make_shared<CheckpointFile>(ckpt_path.string());
    }
    const RunConfig& stored = resumed->config();
    stored_max_steps = stored.train.max_steps;
    // Only the length of the run and how it reports may change on resume; anything else
    // would silently continue a different experiment.
    RunConfig allowed = stored;
    allowed.train.max_steps = requested.train.max_steps;
    allowed.train.eval_interval = requested.train.eval_interval;
    allowed.train.eval_max_bytes = requested.train.eval_max_bytes;
    allowed.train.checkpoint_interval = requested.train.checkpoint_interval;
    allowed.train.log_interval = requested.train.log_interval;
    allowed.train.threads = requested.train.threads;
    allowed.train.nonfinite = requested.train.nonfinite;
    allowed.train.device = requested.train.device;  // checkpoints hold CPU tensors
    allowed.data.dir = requested.data.dir;
    // The schedule's horizon: a checkpoint written before train.decay_steps existed (0)
    // decayed over its max_steps. It changes only when asked for.
    const int64_t horizon =
        stored.train.decay_steps > 0 ? stored.train.decay_steps : stored.train.max_steps;
    const int64_t asked = requested.train.decay_steps;
    allowed.train.decay_steps = asked > 0 && asked != stored.train.decay_steps ? asked : horizon;
    RunConfig compared = requested;
    compared.train.decay_steps = allowed.train.decay_steps;
    const auto diff = compared.diff(allowed);
    if (!diff.empty())
      throw std::runtime_error("`resume`: checkpoint '" + ckpt_path.string() +
                               "' was trained with a different configuration (" + diff.front() +
                               "); only max_steps, decay_steps, intervals, threads, device and "
                               "data.dir may change");
    config = allowed;
    if (allowed.train.decay_steps != horizon)
      notes.push_back(fmt::format("learning-rate schedule: horizon changed from {} to {} steps "
                                  "(train.decay_steps)",
                                  horizon, allowed.train.decay_steps));
    else if (config.train.max_steps < horizon && config.train.schedule != "constant")
      notes.push_back(fmt::format(
          "learning-rate schedule: the horizon stays at {} steps, so the run ends at step {} "
          "before the rate has decayed (set train.decay_steps={} to end the decay there)",
          horizon, config.train.max_steps, config.train.max_steps));
    else if (config.train.max_steps > horizon && config.train.schedule != "constant") {
      // What the schedule itself gives past the horizon (a warm-up longer than the horizon
      // is still rising there).
      const double first = learning_rate(config.train, horizon);
      const double last = learning_rate(config.train, config.train.max_steps - 1);
      const std::string rates =
          fmt::format("{:.3g}", first) == fmt::format("{:.3g}", last)
              ? fmt::format("the rate stays at {:.3g} after it", first)
              : fmt::format("the rate goes from {:.3g} to {:.3g} after it{}", first, last,
                            config.train.warmup_steps > horizon ? " (still warming up)" : "");
      notes.push_back(fmt::format(
          "learning-rate schedule: the horizon stays at {} steps, so {} (set "
          "train.decay_steps={} to stretch the schedule instead)",
          horizon, rates, config.train.max_steps));
    }
  }
}

// Everything before the first step: tokenizer, checks, threads, model and optimizer (restored
// when resuming), the ranks' agreement on configuration, build and data, the run folder's
// files and the start lines. A resumed run that is already finished returns its figures.
std::optional<TrainResult> set_up(Run& run, double& seconds_before) {
  const TrainOptions& options = run.options;
  RunFiles& files = run.files;
  const fs::path &ckpt_path = run.ckpt_path, &out = run.out;
  const RunConfig& config = run.config;
  const std::shared_ptr<CheckpointFile>& resumed = run.resumed;
  const int64_t stored_max_steps = run.stored_max_steps;
  std::vector<std::string>& notes = run.notes;

  // The tokenizer first: a vocabulary mismatch should fail before anything is built.
  data::Tokenizer& tokenizer = run.tokenizer;
  const bool task = run.task = !config.data.task.empty();
  if (options.resume && config.data.tokenizer != "bytes") {
    tokenizer = resumed->tokenizer();
    if (fs::is_regular_file(config.data.tokenizer) &&
        !data::Tokenizer::load(config.data.tokenizer).same_as(tokenizer))
      throw std::runtime_error("`resume`: tokenizer model '" + config.data.tokenizer +
                               "' has changed since checkpoint '" + ckpt_path.string() +
                               "' was written; the run continues only with the tokenizer it "
                               "started with");
    check_tokenizer(config, tokenizer);
  } else {
    tokenizer = resolve_tokenizer(config);
  }

  // Next-token prediction needs a model that cannot see the token it predicts.
  if (!task && !config.model.causal)
    throw std::runtime_error("model.causal is false (preset '" + config.model.preset +
                             "' is an encoder for classification); language-model training "
                             "needs a causal model (e.g. etsmlp-lm instead of etsmlp), or give "
                             "a task (data.task)");
  const auto& t = config.train;
  if (t.warmup_steps >= t.max_steps && t.max_steps > 0 && !options.resume)
    notes.push_back(fmt::format("warning: train.warmup_steps ({}) is not below train.max_steps "
                                "({}): the learning rate never reaches train.lr ({:.3g})",
                                t.warmup_steps, t.max_steps, t.lr));
  dist::ProcessGroup* const group = run.group = options.group.get();
  const bool writer = run.writer = files.writer();
  if (group && t.batch_size % group->world_size() != 0)
    throw std::runtime_error(fmt::format(
        "train.batch_size {} is not a multiple of WORLD_SIZE {}: every rank "
        "takes an equal share of the global batch",
        t.batch_size, group->world_size()));
  // Workers on one machine share its cores: by default each takes its share.
  int64_t want_threads = t.threads;
  if (group && want_threads == 0)
    want_threads = std::max<int64_t>(
        1, static_cast<int64_t>(std::thread::hardware_concurrency()) / group->env().local_world_size);
  const int64_t threads = run.threads = util::configure_threads(want_threads);
  const c10::Device device = run.device = training_device(t.device, group);
  torch::manual_seed(static_cast<uint64_t>(t.seed));
  // Initialised on the CPU (the same weights on any device for a seed), then moved; the
  // optimizer is made for the moved parameters.
  models::SequenceModel& model = run.model = models::SequenceModel(config.model);
  model->to(device);
  auto& optimizer = run.optimizer = make_optimizer(model, t);
  int64_t& start = run.start;
  if (resumed) {
    start = resumed->load(model, optimizer.get(), &seconds_before);
    resumed->close();  // the archive holds a copy of every tensor
    if (t.max_steps < start)
      throw std::runtime_error(fmt::format(
          "train.max_steps {} is below the step of checkpoint '{}' ({}); a run cannot be "
          "shortened (give train.max_steps {} or more, or start a new run in another folder)",
          t.max_steps, ckpt_path.string(), start, start));
  }
  if (group) {
    // Every rank starts from rank 0's weights (and, resuming, its buffers).
    std::vector<at::Tensor> state;
    for (auto& p : model->parameters()) state.push_back(p.detach());
    for (auto& b : model->buffers()) state.push_back(b);
    group->broadcast(state, 0, "sending rank 0's parameters");
  }
  const fs::path final_metrics = out / "metrics.jsonl";
  bool finished = false;
  if (writer && resumed && start == t.max_steps && stored_max_steps == t.max_steps &&
      fs::exists(final_metrics)) {
    const auto lines = read_metrics(final_metrics.string());
    finished = std::any_of(lines.begin(), lines.end(), [&](const nlohmann::json& l) {
      return l.value("final", false) && l.value("step", int64_t{-1}) == start;
    });
  }
  if (group) {  // rank 0 alone holds the metrics
    std::vector<at::Tensor> flag{at::full({1}, finished ? 1 : 0, at::kInt)};
    group->broadcast(flag, 0, "checking whether the run is finished");
    finished = flag[0].item<int>() != 0;
  }
  {
    if (finished) {
      if (group) {
        // Every rank returns the run's figures, which rank 0's metrics hold.
        std::string text = writer ? util::read_file(final_metrics.string()) : std::string();
        group->broadcast_bytes(text, 0, "sending the finished run's metrics");
        if (!writer) {
          const std::string tmp = util::write_temp_file(text, "seqmix-rank-metrics");
          TrainResult r;
          try {
            r = finished_result(tmp, start, seconds_before);
          } catch (...) {
            fs::remove(tmp);
            throw;
          }
          fs::remove(tmp);
          return r;
        }
      }
      fmt::print(stderr,
                 "seqmix train: run '{}' is finished (step {} of train.max_steps {}); nothing to "
                 "do (raise train.max_steps to train further)\n",
                 out.string(), start, t.max_steps);
      return finished_result(final_metrics, start, seconds_before);
    }
  }

  TrainResult& result = run.result;
  std::unique_ptr<MetricsWriter>& metrics = run.metrics;
  std::unique_ptr<util::Progress>& progress = run.progress;
  const LogFn& log = run.log;
  const SayFn& say = run.say;
  TrainingPlan& plan = run.plan;
  auto make_plan = [&] {
    plan = task ? classification_plan(config, model, log, say, result, group)
                : language_model_plan(config, model, tokenizer, log, say, result, group);
  };
  if (!group) {
    // A SIGINT / SIGTERM while a large corpus is read and encoded stops it between chunks
    // (ranks of a group load on: they agree on stopping at the first step).
    struct LoadingStopped {
      int sig;
    };
    try {
      const util::ScopedInterruptCheck stop([] {
        if (const int sig = util::stop_signal(); sig != 0) throw LoadingStopped{sig};
      });
      make_plan();
    } catch (const LoadingStopped& stopped) {
      throw Interrupted(fmt::format("interrupted by {} while loading the data; {}",
                                    util::signal_name(stopped.sig),
                                    resumed ? "the run is as it was" : "nothing was written"),
                        stopped.sig, start, std::string());
    }
  } else {
    // A rank that cannot read its data must not leave the others waiting; then the ranks must
    // be about to run the same experiment on the same data with the same code.
    group->all_or_none("loading the data", make_plan);
    // Where each machine keeps the data and how many threads it runs may differ (the data
    // hash below checks the data itself).
    RunConfig compared = config;
    compared.data.dir.clear();
    compared.train.threads = 0;
    group->agree("the configuration", compared.to_toml(), [](const std::string& a, const std::string& b) {
      try {
        const auto d = RunConfig::from_toml(b, "rank").diff(RunConfig::from_toml(a, "rank 0"));
        return d.empty() ? std::string() : d.front();
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
    });
    group->agree("the seqmix build", SEQMIX_BUILD_ID, [](const std::string& a, const std::string& b) {
      return "'" + b + "' vs rank 0's '" + a + "'";
    });
    group->agree("the training and held-out data", plan.fingerprint,
                 [&](const std::string& a, const std::string& b) {
                   return "data hash " + b + " vs rank 0's " + a +
                          " (is data.dir the same data on every machine?)";
                 });
  }
  if (resumed) check_same_data(*resumed, plan, options.allow_data_change);
  const fs::path metrics_path = files.metrics_path();
  if (!writer) {
    // Nothing of the folder is touched below on this rank.
  } else if (!options.resume && !files.promoted() && metrics_path == final_metrics) {
    // A fresh run in a folder that held none: the configuration is visible from the start.
    files.created(out / "config.toml");
    files.created(metrics_path);
    util::write_file_atomic((out / "config.toml").string(), config.to_toml());
    if (!tokenizer.is_bytes()) {
      files.created(out / "tokenizer.model");
      tokenizer.save((out / "tokenizer.model").string());
    }
  } else if (!options.resume) {
    files.created(metrics_path);
  }
  if (writer && options.resume && fs::exists(metrics_path)) {
    // Lines logged after the checkpoint belong to steps that will be redone: drop them so the
    // file reads as one uninterrupted run.
    std::string kept;
    for (const auto& line : read_metrics(metrics_path.string()))
      if (line.value("step", int64_t{0}) <= start) kept += line.dump() + "\n";
    util::write_file_atomic(metrics_path.string(), kept);
  }
  if (writer) metrics = std::make_unique<MetricsWriter>(metrics_path.string(), options.resume);

  util::ProgressOptions progress_options;
  if (!writer) progress_options.out = dev_null();
  progress = std::make_unique<util::Progress>("train", t.max_steps, start, progress_options);
  const nn::Precision precision = run.precision = nn::parse_precision(t.precision);
  say(fmt::format("seqmix train: {} ({}), {} parameters, {}{} threads{}, {}; {}; batch {}, {} "
                  "steps{}",
                  config.model.preset, config.model.size, config.model.num_parameters(),
                  run.device.is_cpu() ? "" : run.device.str() + ", ", threads,
                  group ? fmt::format(" per worker x {} workers ({})", group->world_size(),
                                      group->backend_name())
                        : "",
                  precision == nn::Precision::bf16
                      ? "bf16 mixed precision: " + util::onednn_description() + "; " +
                            util::blas_description() + " for fp32 products"
                      : util::blas_description(),
                  plan.description, plan.batch_shape, t.max_steps,
                  options.resume ? fmt::format(", resuming at step {}", start) : ""));
  // The whole resolved configuration, briefly (config.toml in the run folder holds it in full).
  std::istringstream summary(config_summary(config));
  for (std::string line; std::getline(summary, line);) say(line);
  for (const auto& n : notes) say(n);
  return std::nullopt;
}

// The training loop, from run.start to train.max_steps: schedule, forward under autocast,
// backward, gradient all-reduce, non-finite checks, clipping, the optimizer step, logging,
// held-out evaluation, checkpoints and stop signals; then the final evaluation.
TrainResult training_loop(Run& run) {
  const TrainOptions& options = run.options;
  RunFiles& files = run.files;
  const fs::path &ckpt_path = run.ckpt_path, &out = run.out;
  const std::function<double()>& run_seconds = run.run_seconds;
  const RunConfig& config = run.config;
  const auto& t = config.train;
  const std::shared_ptr<CheckpointFile>& resumed = run.resumed;
  const int64_t stored_max_steps = run.stored_max_steps, start = run.start;
  const data::Tokenizer& tokenizer = run.tokenizer;
  const bool task = run.task, writer = run.writer;
  dist::ProcessGroup* const group = run.group;
  models::SequenceModel& model = run.model;
  std::unique_ptr<torch::optim::AdamW>& optimizer = run.optimizer;
  TrainingPlan& plan = run.plan;
  const nn::Precision precision = run.precision;
  std::unique_ptr<util::Progress>& progress = run.progress;
  TrainResult& result = run.result;
  const LogFn& log = run.log;
  const SayFn& say = run.say;

  int64_t last_checkpoint = start;
  // Buffers (BatchNorm's running statistics) follow each rank's own batches: rank 0's are
  // the model's, sent to all before anything is scored or saved (DDP's broadcast_buffers).
  auto sync_buffers = [&] {
    if (!group) return;
    std::vector<at::Tensor> buffers;
    for (auto& b : model->buffers()) buffers.push_back(b);
    group->broadcast(buffers, 0, "sending rank 0's buffers");
  };
  // A stop signal during an evaluation (the final one scores the whole split: minutes on a
  // large corpus) ends it between batches, as training stops between steps: held_out returns
  // the signal, 0 when the evaluation ran to its end. A rank of a group evaluates to the end:
  // the others would wait for it.
  struct EvaluationStopped {
    int sig;
  };
  auto held_out = [&](int64_t step, bool final) -> int {
    sync_buffers();
    const nn::AutocastGuard autocast(precision);
    if (group) {
      plan.held_out(step, final);
      return 0;
    }
    try {
      const util::ScopedInterruptCheck stop([] {
        if (const int sig = util::stop_signal(); sig != 0) throw EvaluationStopped{sig};
      });
      plan.held_out(step, final);
    } catch (const EvaluationStopped& stopped) {
      return stopped.sig;
    }
    return 0;
  };
  auto checkpoint = [&](int64_t step) {
    sync_buffers();
    // Weights that are no longer finite (train.nonfinite = skip lets an update through that
    // overflows them) must never replace a good checkpoint.
    if (const std::string bad = nonfinite_parameter(model); !bad.empty())
      throw std::runtime_error(fmt::format(
          "step {}: parameter '{}' is no longer finite; training stopped without writing a "
          "checkpoint. {} (lower train.lr)",
          step, bad,
          last_checkpoint > 0 ? fmt::format("The last good checkpoint '{}' (step {}) is intact",
                                            ckpt_path.string(), last_checkpoint)
                              : std::string("No checkpoint had been written yet")));
    if (writer)
      save_checkpoint(ckpt_path.string(), model, optimizer.get(), config, step, tokenizer,
                      run_seconds(), {plan.fingerprint, plan.data_sizes});
    files.promote(config.to_toml(), tokenizer);
    last_checkpoint = step;
  };
  auto interrupted = [&](int64_t step, int sig) {
    progress->finish();
    // A resumed run stopped before its first step still has the checkpoint it started from.
    if (step > last_checkpoint) checkpoint(step);
    log({{"step", step}, {"event", "interrupted"}, {"signal", util::signal_name(sig)}});
    const bool saved = step > 0;
    return Interrupted(
        saved ? fmt::format("interrupted by {} after step {} of {}; checkpoint '{}' holds it. "
                            "Resume it with: seqmix train --out {} --resume (in Python: "
                            "seqmix.train(..., resume=True))",
                            util::signal_name(sig), step, t.max_steps, ckpt_path.string(),
                            out.string())
              : fmt::format("interrupted by {} before the first step; nothing was written",
                            util::signal_name(sig)),
        sig, step, saved ? ckpt_path.string() : std::string());
  };
  // Any rank's SIGINT / SIGTERM stops every rank at the same step.
  // The signal that stops every rank: the largest any rank got (SIGTERM over SIGINT), 0 = none.
  auto agreed_signal = [&](int sig) {
    if (!group) return sig;
    at::Tensor v = at::full({1}, sig, at::kInt);
    group->all_reduce_max(v, "checking for a stop signal");
    return v.item<int>();
  };
  if (const int sig = agreed_signal(util::stop_signal()); sig != 0) throw interrupted(start, sig);

  std::unique_ptr<dist::GradientReducer> reducer;
  if (options.group) reducer = std::make_unique<dist::GradientReducer>(options.group, model->parameters());
  double comm_wait_sum = 0, comm_span_sum = 0;

  model->train();
  double loss_sum = 0;
  int64_t loss_n = 0, correct_sum = 0, count_sum = 0;
  double grad_norm = 0;
  LossSpikeWatch spikes;
  auto t_log = std::chrono::steady_clock::now();
  for (int64_t step = start; step < t.max_steps; ++step) {
    const double lr = learning_rate(t, step);
    for (auto& g : optimizer->param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    optimizer->zero_grad();
    // With skip, BatchNorm's running statistics are restored too if the step goes: the
    // forward pass has already folded the bad batch into them.
    std::vector<at::Tensor> buffers;
    if (t.nonfinite == "skip")
      for (const auto& b : model->buffers()) buffers.push_back(b.clone());
    // Dropout: each rank its own masks, a function of (seed, step, rank) so that a resumed
    // data-parallel run draws what the uninterrupted one would have.
    if (group)
      torch::manual_seed(util::mix64(static_cast<uint64_t>(t.seed) ^
                                     util::mix64((static_cast<uint64_t>(step) << 20) +
                                                 static_cast<uint64_t>(group->rank()))));
    // The forward pass under autocast; backward and the optimizer step outside it, as with
    // torch.autocast (backward runs each op in the dtype its forward used).
    const BatchLoss sl = [&] {
      const nn::AutocastGuard autocast(precision);
      return plan.step(step);
    }();
    sl.loss.backward();
    if (reducer) {
      const auto timing = reducer->finish();
      comm_wait_sum += timing.exposed;
      comm_span_sum += timing.span;
    }
    if (options.after_backward) options.after_backward(step + 1, model);
    double l = sl.loss.item<double>();
    int64_t step_correct = sl.correct, step_count = sl.count;
    int stop_now = 0;  // the signal that stops this step's rank(s), agreed below
    if (group) {
      // The global batch's mean loss and counts; a stop signal on any rank stops all.
      at::Tensor v = at::tensor({l, static_cast<double>(sl.correct), static_cast<double>(sl.count),
                                 util::stop_signal() != 0 ? 1.0 : 0.0},
                                at::kDouble);
      group->all_reduce_sum(v, "the step's loss");
      const auto* p = v.data_ptr<double>();
      l = p[0] / group->world_size();
      step_correct = static_cast<int64_t>(std::llround(p[1]));
      step_count = static_cast<int64_t>(std::llround(p[2]));
      if (p[3] > 0) stop_now = agreed_signal(util::stop_signal());
    }
    const int64_t done = step + 1;
    // Checked before clipping, which would spread one bad gradient over all of them. The
    // norm is taken (and logged) even without clipping: finite gradients can still have a
    // norm that overflows.
    std::string bad = nonfinite(l, model);
    const bool log_now = done % t.log_interval == 0 || done == t.max_steps;
    nlohmann::json grad_norms;
    if (bad.empty() && log_now) grad_norms = grad_norms_by_block(model);
    if (bad.empty()) {
      grad_norm = torch::nn::utils::clip_grad_norm_(
          model->parameters(),
          t.grad_clip > 0 ? t.grad_clip : std::numeric_limits<double>::infinity());
      if (!std::isfinite(grad_norm)) bad = fmt::format("the gradient norm is {}", grad_norm);
    }
    if (!bad.empty()) {
      if (t.nonfinite != "skip") {
        progress->finish();
        throw std::runtime_error(fmt::format(
            "step {}: {}; training stopped. {} (set train.nonfinite=skip to skip such steps "
            "instead, or lower train.lr)",
            done, bad,
            last_checkpoint > 0
                ? fmt::format("The last good checkpoint '{}' (step {}) is intact",
                              ckpt_path.string(), last_checkpoint)
                : std::string("No checkpoint had been written yet")));
      }
      optimizer->zero_grad();
      {
        torch::NoGradGuard no_grad;
        size_t i = 0;
        for (auto& b : model->buffers()) b.copy_(buffers[i++]);
      }
      log({{"step", done}, {"event", "skipped_step"}, {"reason", bad}});
      say(fmt::format("step {}: {}; step skipped (train.nonfinite = skip)", done, bad));
      ++result.skipped_steps;
    } else {
      optimizer->step();
      loss_sum += l;
      ++loss_n;
      if (task) {  // the counts behind a classifier's training accuracy
        correct_sum += step_correct;
        count_sum += step_count;
      }
      if (const std::string w = spikes.check(done, l); !w.empty()) {
        log({{"step", done}, {"event", "warning"}, {"reason", w}});
        say("warning: " + w);
      }
    }
    if (log_now && loss_n > 0) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - t_log).count();
      t_log = now;
      const double mean = loss_sum / static_cast<double>(loss_n);
      nlohmann::json line{{"step", done},
                          {"split", "train"},
                          {"loss", mean},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {plan.unit + "_per_s",
                           dt > 0 ? static_cast<double>(loss_n * plan.units_per_step) / dt
                                  : 0.0}};
      // Perplexity for language models only; bits per byte only where a token is a byte
      // (held-out lines carry it for every tokenizer).
      if (!task) line["perplexity"] = std::exp(mean);
      if (plan.train_bpc) line["bpc"] = mean / std::log(2.0);
      if (!grad_norms.is_null()) line["grad_norms"] = grad_norms;
      if (count_sum > 0)
        line["accuracy"] = static_cast<double>(correct_sum) / static_cast<double>(count_sum);
      if (group) {
        // Seconds per step spent waiting for gradient all-reduces after backward (the part
        // not hidden under it), and from the first all-reduce's start to the last one's end.
        line["comm_wait_s"] = comm_wait_sum / static_cast<double>(loss_n);
        line["comm_span_s"] = comm_span_sum / static_cast<double>(loss_n);
        line["world_size"] = group->world_size();
      }
      comm_wait_sum = 0;
      comm_span_sum = 0;
      log(line);
      correct_sum = 0;
      count_sum = 0;
      result.final_train_loss = mean;
      loss_sum = 0;
      loss_n = 0;
      if (!progress->tty() && (options.report_interval <= 0 ||
                              done % options.report_interval == 0 || done == t.max_steps))
        progress->update(done, fmt::format("loss {:.4f} lr {:.2e}", mean, lr));
    }
    if (progress->tty()) progress->update(done, fmt::format("loss {:.4f} lr {:.2e}", l, lr));
    if (t.eval_interval > 0 && done % t.eval_interval == 0 && done < t.max_steps)
      if (const int sig = held_out(done, false); sig != 0) throw interrupted(done, sig);
    if ((t.checkpoint_interval > 0 && done % t.checkpoint_interval == 0) || done == t.max_steps ||
        done == options.halt_after_step)
      checkpoint(done);
    if (done == options.halt_after_step) {
      progress->finish();
      result.steps = done;
      result.halted = true;
      result.seconds = run_seconds();
      return result;
    }
    if (const int sig = group ? stop_now : util::stop_signal(); sig != 0)
      throw interrupted(done, sig);
  }
  progress->finish();
  // Resumed exactly at the end: a shortened run (checkpoint it with its new length) or one
  // that stopped before its final evaluation.
  if (start >= t.max_steps && !files.promoted() && (!resumed || stored_max_steps != t.max_steps))
    checkpoint(t.max_steps);
  // Interrupted here, the checkpoint of the last step is written: resuming runs this
  // evaluation again.
  if (const int sig = held_out(std::max(start, t.max_steps), true); sig != 0)
    throw interrupted(std::max(start, t.max_steps), sig);
  if (!std::isfinite(result.eval_loss))
    throw std::runtime_error(fmt::format(
        "the final evaluation's loss is {}: the weights at step {} produce NaN or inf on "
        "held-out data (checkpoint '{}'); lower train.lr or raise train.warmup_steps",
        result.eval_loss, std::max(start, t.max_steps), ckpt_path.string()));
  result.steps = std::max(start, t.max_steps);
  result.seconds = run_seconds();
  return result;
}


TrainResult train_in_folder(const RunConfig& requested, const TrainOptions& options,
                            RunFiles& files, const fs::path& ckpt_path,
                            const std::function<double()>& run_seconds, double& seconds_before) {
  Run run(options, files, ckpt_path, run_seconds);
  resolve_against_checkpoint(run, requested);
  if (auto finished = set_up(run, seconds_before)) return *finished;
  return training_loop(run);
}

RunFiles open_run_folder(const fs::path& out, const fs::path& ckpt_path,
                         const TrainOptions& options) {
  {
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec))
      throw std::runtime_error("`out_dir`: '" + out.string() + "' exists and is not a folder");
  }
  std::error_code ec;
  // Whether this process made the folder is what mkdir(2) says, not what was there a moment
  // before: two processes starting on one new folder both saw none, and the one that loses
  // the lock must not remove the folder the other is now training in.
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  bool created_dir = ::mkdir(out.c_str(), 0777) == 0;
  const int mkdir_error = created_dir ? 0 : errno;
  if ((!created_dir && mkdir_error != EEXIST) || !fs::is_directory(out, ec))
    throw std::runtime_error("cannot create run folder '" + out.string() +
                             "': " + std::strerror(mkdir_error ? mkdir_error : ENOTDIR));
  // Without the lock nothing here is this process's to clean up (the folder, even if made
  // here, may already hold another process's run).
  std::shared_ptr<util::FolderLock> lock =
      options.lock ? options.lock : std::make_shared<util::FolderLock>(out.string(), "run folder");
  // The files this run will write are regular files or absent: a folder, FIFO or link there
  // is refused now, not after the whole run was trained.
  for (const char* name : {"checkpoint.pt", "config.toml", "metrics.jsonl", "tokenizer.model",
                           ".metrics.jsonl.overwrite"})
    util::check_replaceable((out / name).string());
  const auto existing = util::run_files_in(out.string());
  // A run that never wrote a checkpoint (killed before its first one) has nothing to resume
  // or lose: a new run replaces its files the way --overwrite does.
  const bool dead = !existing.empty() && !fs::exists(ckpt_path);
  const bool overwrite = (options.overwrite || dead) && !existing.empty();
  RunFiles files(out, created_dir, overwrite);
  if (!options.resume && !options.overwrite && !dead && !existing.empty()) {
    std::string names;
    for (const auto& f : existing) names += (names.empty() ? "" : ", ") + f;
    throw std::runtime_error("run folder '" + out.string() + "' already holds a run (" + names +
                             "); continue it with `resume`, or replace it with `overwrite`");
  }
  if (existing.empty() && !created_dir) {
    // Not a run: a folder of the user's own (or /). seqmix writes only into a new or empty
    // folder, or a run's.
    for (const auto& e : fs::directory_iterator(out, ec)) {
      (void)e;
      throw std::runtime_error("`out_dir`: '" + out.string() +
                               "' is not empty and holds no seqmix run; give a new or empty "
                               "folder");
    }
  }
  if (options.resume && dead)
    throw std::runtime_error("`resume`: run folder '" + out.string() +
                             "' has no checkpoint.pt (the run stopped before its first one); "
                             "start it again without `resume`");
  files.keep_lock(std::move(lock));
  return files;
}

}  // namespace

TrainResult train(const RunConfig& requested, const TrainOptions& options) {
  const auto t_entry = std::chrono::steady_clock::now();
  double seconds_before = 0;  // the run's time before this resume
  auto run_seconds = [&] {
    return seconds_before +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t_entry).count();
  };
  if (options.out_dir.empty()) throw std::invalid_argument("`out_dir`: a training run needs its run folder");
  // A configuration built in code has not been through resolve_config's checks.
  try {
    requested.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("invalid configuration: ") + e.what());
  }
  if (options.resume && options.overwrite)
    throw std::invalid_argument("`resume` continues the run in the folder and `overwrite` "
                                "replaces it: give one of them");
  // A device this machine lacks is refused before the run folder is touched.
  try {
    util::require_device(requested.train.device, "train.device");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  util::check_path_text(options.out_dir, "`out_dir`");
  const fs::path out(options.out_dir);
  const fs::path ckpt_path = out / "checkpoint.pt";
  std::optional<RunFiles> files;
  auto open_folder = [&] { files.emplace(open_run_folder(out, ckpt_path, options)); };
  if (!options.group) {
    open_folder();
  } else {
    // Only rank 0 touches the run folder; the others learn whether it could.
    options.group->all_or_none("opening the run folder", [&] {
      if (options.group->rank() == 0) open_folder();
    });
    if (options.group->rank() != 0) files.emplace(out, false, false, /*writer=*/false);
  }
  try {
    return train_in_folder(requested, options, *files, ckpt_path, run_seconds, seconds_before);
  } catch (...) {
    files->abandon();
    throw;
  }
}

}  // namespace seqmix::train
