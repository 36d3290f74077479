// Checkpoints through the library: every kind of model saved and loaded back exactly.
// (Corrupt and crafted checkpoints, as the commands refuse them: tests/cli/test_checkpoint.cpp.)
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace fs = std::filesystem;

namespace {

TEST(Checkpoint, EveryKindOfModelLoadsExactly) {
  const std::string dir = seqmix::testing::temp_dir("checkpoint-kinds");
  std::vector<std::pair<std::string, seqmix::models::ModelConfig>> kinds;
  for (const std::string family : {"weird-net", "weird-net-a", "moss", "transformer"})
    kinds.emplace_back(family, seqmix::models::make_model_config(family, "tiny"));
  auto base = seqmix::models::make_model_config("weird-net", "tiny");
  auto add = [&](const std::string& name, auto edit) {
    auto c = base;
    edit(c);
    kinds.emplace_back(name, c);
  };
  add("extractor", [](auto& c) { c.mixers = {"extractor", "attention"}; });
  add("etsmlp", [](auto& c) { c.mixers = {"etsmlp"}; });
  add("batchnorm", [](auto& c) {
    c.mixers = {"etsmlp"};
    c.norm_type = "batch";
  });
  add("bare", [](auto& c) {
    c.norm = false;
    c.bias = false;
    c.tie_embeddings = false;
  });
  add("classifier", [](auto& c) {
    c.causal = false;
    c.n_classes = 2;  // retrieval's
    c.cls_pair = true;
  });
  for (auto& [name, model_config] : kinds) {
    SCOPED_TRACE(name);
    model_config.max_len = 16;
    seqmix::train::RunConfig c;
    c.model = model_config;
    if (c.model.n_classes > 0) c.data.task = "retrieval";
    torch::manual_seed(1);
    seqmix::models::SequenceModel m(c.model);
    torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3));
    for (auto& p : m->parameters()) p.mutable_grad() = at::ones_like(p);
    opt.step();
    const std::string path = dir + "/" + name + ".pt";
    seqmix::train::save_checkpoint(path, m, &opt, c, 1);
    seqmix::models::SequenceModel m2(seqmix::train::read_checkpoint_config(path).model);
    torch::optim::AdamW opt2(m2->parameters(), torch::optim::AdamWOptions(1e-3));
    EXPECT_NO_THROW(seqmix::train::load_checkpoint(path, m2, &opt2));
    for (const int64_t layers : {c.model.n_layers - 1, c.model.n_layers + 1}) {
      auto other = c.model;
      other.n_layers = layers;
      if (other.mixers.size() > static_cast<size_t>(layers)) other.mixers.resize(1);
      seqmix::models::SequenceModel m3(other);
      try {
        seqmix::train::load_checkpoint(path, m3, nullptr);
        ADD_FAILURE() << layers << " layers: no error";
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(layers < c.model.n_layers ? "' holds tensor 'blocks."
                                                      : "' lacks parameter 'blocks."),
                  std::string::npos)
            << what;
      }
    }
  }
  fs::remove_all(dir);
}

// Inputs of fuzz/fuzz_checkpoint (mutations inside a valid archive, tests/data/fuzz) that read
// a null storage or past a tensor record before the contents were checked.
}  // namespace
