#include "seqmix/train/configuration/task_presets.h"

#include <fmt/format.h>

#include <stdexcept>

#include "seqmix/data/tasks.h"
#include "seqmix/models/presets.h"

namespace seqmix::train {

namespace {

struct Shape {
  int64_t n_layers, d_model, d_ff, n_heads, batch;
  int64_t steps;   ///< iterations, or 0 when `epochs` is given
  int64_t epochs;  ///< passes over the default training split
};

// AIB-Net Table II. Heads are not in the table: LRA's own configurations use 8 heads for
// ListOps and 4 for Text and Retrieval; the small image models get D / 16.
Shape aib_paper(const std::string& task) {
  if (task == "listops") return {4, 512, 1024, 8, 32, 5000, 0};
  if (task == "text") return {4, 256, 1024, 4, 32, 20000, 0};
  if (task == "retrieval") return {4, 128, 512, 4, 32, 5000, 0};
  if (task == "image") return {1, 64, 128, 4, 256, 0, 200};
  if (task == "pathfinder") return {2, 32, 64, 2, 512, 0, 200};
  return {1, 16, 32, 1, 64, 0, 800};  // pathx
}

struct EtsmlpRow {
  int64_t d_model, n_layers, hidden;
  const char* norm;
  double lr, weight_decay, dropout;
};

// ETSMLP Table 5 (D, L, H, Norm, LR, WD, DP).
EtsmlpRow etsmlp_paper(const std::string& task) {
  if (task == "listops") return {160, 12, 160, "layer", 0.01, 0.01, 0.0};
  if (task == "text") return {160, 4, 160, "layer", 0.005, 0.01, 0.1};
  if (task == "retrieval") return {160, 6, 160, "layer", 0.005, 0.01, 0.1};
  if (task == "image") return {160, 12, 320, "batch", 0.01, 0.01, 0.0};
  if (task == "pathfinder") return {128, 6, 256, "batch", 0.01, 0.01, 0.0};
  return {128, 6, 256, "batch", 0.05, 0.01, 0.0};  // pathx
}

// Ours, measured on 2 cores (docs/TASKS.md): one shape per task for every family, sized so
// the slowest family here (softmax attention, quadratic in max_len) finishes in about an
// hour; max_len 0 keeps the task's own length. Text and Retrieval are cut to 2048 bytes
// (per document) because attention over 4096 positions takes 16 s per step of 8 here.
struct CpuShape {
  Shape shape;
  int64_t max_len;
};
CpuShape cpu_shape(const std::string& task) {
  if (task == "listops") return {{2, 64, 128, 4, 16, 400, 0}, 0};
  if (task == "text") return {{2, 64, 128, 4, 8, 800, 0}, 2048};
  // Retrieval at its CPU setting (make_task_config): 1024-byte passages.
  if (task == "retrieval") return {{2, 64, 128, 4, 8, 4000, 0}, 1024};
  if (task == "image") return {{2, 64, 128, 4, 32, 1500, 0}, 0};
  // Pathfinder at its CPU setting (make_task_config): 16 x 16 = 256 pixels.
  if (task == "pathfinder") return {{2, 64, 128, 4, 32, 12000, 0}, 256};
  return {{1, 32, 64, 2, 4, 400, 0}, 0};  // pathx
}

// Default training-split sizes (data/tasks.cpp and the loaders), for epoch-based rows.
int64_t default_train_examples(const std::string& task) {
  if (task == "image") return 55000;
  if (task == "pathfinder" || task == "pathx") return 160000;  // LRA's 80% of 200K images
  return 0;
}

}  // namespace

bool is_task_size(const std::string& size) { return size == "cpu" || size == "paper"; }

RunConfig make_task_config(const std::string& family, const std::string& task,
                           const std::string& size) {
  const data::TaskInfo& info = data::task_info(task);
  if (!is_task_size(size))
    throw std::invalid_argument("unknown task size '" + size +
                                "' (expected cpu or paper; the model sizes tiny ... large are "
                                "for language modelling)");
  const models::ModelPreset& preset = models::find_preset(family);
  RunConfig c;
  c.model = models::make_model_config(family, "mini");
  auto& m = c.model;
  m.size = size;
  m.vocab_size = info.vocab_size;
  m.n_classes = info.n_classes;
  m.cls_pair = info.pair;
  m.max_len = info.max_len;
  m.causal = preset.task_role == models::TaskRole::decoder;
  c.data.task = task;
  auto& t = c.train;
  t.eval_interval = 0;
  t.log_interval = 10;
  t.weight_decay = 0.01;
  t.beta2 = 0.98;
  t.schedule = "linear";
  t.min_lr_ratio = 0.0;
  t.grad_clip = 1.0;
  t.lr = 1e-3;

  const bool ets = preset.task_recipe == models::TaskRecipe::etsmlp;
  const Shape s = size == "cpu" ? cpu_shape(task).shape : aib_paper(task);
  if (size == "cpu" && cpu_shape(task).max_len > 0) m.max_len = cpu_shape(task).max_len;
  m.n_layers = s.n_layers;
  m.d_model = s.d_model;
  m.d_ff = s.d_ff;
  m.n_heads = s.n_heads;
  t.batch_size = s.batch;
  t.max_steps = s.steps > 0 ? s.steps
                            : s.epochs * ((default_train_examples(task) + s.batch - 1) / s.batch);
  if (ets) {
    // ETSMLP's own recipe (Table 5: norm, LR, WD, dropout) at either size; its shape (D,
    // layers, H) only at the paper size, the CPU size keeping the shape common to all.
    // Measured: at lr 1e-3 the CPU-sized ETSMLP stayed at the majority class on ListOps.
    const EtsmlpRow r = etsmlp_paper(task);
    if (size == "paper") {
      m.d_model = r.d_model;
      m.n_layers = r.n_layers;
      m.d_ff = r.hidden;
    }
    m.norm_type = r.norm;
    m.dropout = r.dropout;
    t.lr = r.lr;
    t.weight_decay = r.weight_decay;
    if (size == "cpu" && task == "pathfinder") {
      // Tuned on the validation split (docs/CLAIMS.md, "ETSMLP on ListOps and Pathfinder"):
      // at Table 5's 0.01 the CPU-sized ETSMLP stays at one class for all 12,000 steps; at
      // 1e-3 it leaves chance by step 6,000 and learns the path.
      t.lr = 1e-3;
    }
  }
  if (size == "cpu" && (task == "pathfinder" || task == "retrieval") &&
      preset.name == "transformer") {
    // Tuned on the validation split (docs/CLAIMS.md, "The Transformer on Retrieval and
    // Pathfinder"): at the AIB encoder's 1e-3 the Transformer stays at one class for the
    // whole budget on both; at 3e-4 it leaves chance (Pathfinder by step 4,000 of 12,000,
    // Retrieval by step 3,000 of 4,000) and learns the task.
    t.lr = 3e-4;
  }
  t.warmup_steps = t.max_steps / 10;
  if (size == "cpu" && task == "retrieval") {
    // The warm-up, tuned on the validation split with the AIB encoder (docs/CLAIMS.md, "The
    // CPU settings of Retrieval and Pathfinder"), then kept for every model on the common
    // recipe: warming up over 400 of the 4,000 steps it stays at one class (validation
    // 50.0%), over 30 it leaves it by step 3,000 (70.4%). Over three seeds it still learns in
    // only one: the task has Pathfinder's plateau at this budget. The Transformer keeps the
    // warm-up its learning rate was tuned with, ETSMLP its paper's 10%.
    if (!ets && preset.name != "transformer") t.warmup_steps = 30;
    // Two towers per example: scoring 2 x 2000 pairs plus as many training pairs would take
    // the Transformer half an hour on its own.
    c.data.valid_examples = 500;
    c.data.test_examples = 1000;
    // Measured (docs/CLAIMS.md): with negatives from the 2 presidents on
    // either side in time (the task's default, an authorship question) the AIB encoder stays
    // at 50% after 4,000 steps of 8 pairs of 1024 bytes, although a TF-IDF baseline shows a
    // weak signal (59%); with negatives from any president it reaches 68% (11 SE) in the
    // same budget, 11 minutes on one thread. The era then carries much of the signal.
    c.data.retrieval_negative_neighbours = 0;
  }
  if (size == "cpu" && task == "pathfinder") {
    // LRA's 32 x 32 "hard" set (14 dashes, 5 distractors) left the AIB encoder at chance
    // after 1,500 steps here, and so did 16 x 16 with 14 dashes and 5 distractors or with 6
    // and none. At 16 x 16, 6 dashes, no distractors it stays at 50% for 6,000 steps, then
    // learns: 62% at step 8,000, 75% at 12,000 (16 minutes on one thread; docs/CLAIMS.md). 200,000 training images (LRA had 160K of
    // 32 x 32) so that 12,000 steps of 32 see each about twice.
    c.data.pathfinder_resolution = 16;
    c.data.pathfinder_dashes = 6;
    c.data.pathfinder_distractors = 0;
    c.data.train_examples = 200000;
  }
  if (size == "paper" && (task == "pathfinder" || task == "pathx")) {
    // LRA's split of its 200K images (the generators' CPU defaults are smaller).
    c.data.train_examples = 160000;
    c.data.valid_examples = 20000;
    c.data.test_examples = 20000;
  }
  // A model past ~100M parameters is not one this machine can train on a task (nor one the
  // papers propose): the Extractor's D x D matrix per lag and layer gets there first.
  const double params = m.num_parameters_approx();
  if (params > 100e6)
    throw std::invalid_argument(fmt::format(
        "model '{}' cannot run task '{}' at size '{}': {:.0f}M parameters at {} positions, "
        "d_model {}, {} layers (limit 100M; the Extractor learns one D x D matrix per lag "
        "and layer)",
        family, task, size, params / 1e6, m.max_len, m.d_model, m.n_layers));
  m.validate();
  return c;
}

}  // namespace seqmix::train
