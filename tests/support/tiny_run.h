#pragma once
// One tiny byte-level Weird-Net on a tiny corpus, and what the export tests do with it: its
// logits on fixed tokens, its tensors as a bare state dict, a pickle written to a file.
#include <torch/serialize.h>

#include <fstream>
#include <string>
#include <vector>

#include "seqmix/models/presets.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/resolve.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace seqmix::testing {

/// The request of one tiny byte-level language model on `corpus`.
inline train::RunRequest tiny_request(const std::string& corpus) {
  train::RunRequest r;
  r.overrides = {"model.preset=\"weird-net\"", "model.size=\"tiny\"", "model.max_len=32",
                 "train.batch_size=2", "data.source=\"" + corpus + "\""};
  return r;
}

/// The model's logits on 2 x 12 fixed tokens, in eval mode (`m` is a handle: shares the module).
inline at::Tensor logits(models::SequenceModel m) {
  m->eval();
  torch::NoGradGuard g;
  const at::Tensor tokens = at::arange(24, at::kLong).remainder(200).view({2, 12});
  return m->forward(tokens);
}

/// The model's tensors as a bare state dict (what Python's dict(model.state_dict()) holds).
inline c10::Dict<std::string, at::Tensor> state_of(models::SequenceModel& m) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& p : m->named_parameters()) d.insert(p.key(), p.value().detach().clone());
  for (const auto& b : m->named_buffers()) d.insert(b.key(), b.value().detach().clone());
  return d;
}

inline void write_pickle(const std::string& path, const c10::IValue& v) {
  const std::vector<char> bytes = torch::pickle_save(v);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A one-layer tiny Weird-Net trained 6 steps on `corpus` (batch 4, one thread), with a
/// checkpoint every 2 steps and a metrics line every step: the run-folder tests' run.
inline train::RunConfig tiny_config(const std::string& corpus) {
  train::RunConfig c;
  c.model = models::make_model_config("weird-net", "tiny");
  c.model.max_len = 32;
  c.model.n_layers = 1;
  c.data.source = corpus;
  c.train.batch_size = 4;
  c.train.max_steps = 6;
  c.train.warmup_steps = 1;
  c.train.eval_interval = 0;
  c.train.checkpoint_interval = 2;
  c.train.log_interval = 1;
  c.train.threads = 1;
  return c;
}

/// A temporary folder with a tiny corpus, the resolved configuration of a tiny model on it,
/// and that model, initialised from seed 3.
struct Tiny {
  std::string dir, corpus;
  train::RunRequest request;
  train::RunConfig config;
  models::SequenceModel model{nullptr};
  explicit Tiny(const std::string& name)
      : dir(temp_dir(name)), corpus(tiny_corpus(dir)), request(tiny_request(corpus)),
        config(train::resolve_run(request)) {
    torch::manual_seed(3);
    model = models::SequenceModel(config.model);
  }
};

}  // namespace seqmix::testing
