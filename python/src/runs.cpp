// seqmix._C: the run layer (train/configuration/resolve.h, train/serialization/export.h,
// generate/sampler.h, train/evaluate.h) and the ops benchmark, for seqmix.build / seqmix.load / Model.save /
// Model.generate / Model.evaluate and `python -m seqmix.bench`. Everything a front end decides
// (configuration order, tokenizer -> vocab_size, checkpoint checks, the run-folder rules) is
// the library's, exactly as the CLI gets it.
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstring>

#include "bindings.h"
#include "seqmix/bench/ops_bench.h"
#include "seqmix/dist/process_group.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/generate/sampler.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/device.h"
#include "seqmix/util/signals.h"

namespace seqmix::python {
namespace {

models::SequenceModel model_of(const ModulePtr& module) {
  return models::SequenceModel(as<models::SequenceModelImpl>(module, "a seqmix model"));
}

// Checked sampling options (generate::validate's errors name the CLI flags; Model.generate
// checks its keywords first).
generate::SamplingOptions sampling(double temperature, int64_t top_k, double top_p) {
  generate::SamplingOptions options;
  options.temperature = temperature;
  options.top_k = top_k;
  options.top_p = top_p;
  generate::validate(options);
  return options;
}

py::tuple loaded(train::LoadedRun run) {
  return py::make_tuple(ModulePtr(run.model.ptr()), std::move(run.config),
                        std::move(run.tokenizer));
}

py::object to_python(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

}  // namespace

void bind_runs(py::module_& m) {
  py::class_<train::RunConfig>(m, "RunConfig", py::module_local())
      .def("to_toml", &train::RunConfig::to_toml)
      .def_static("from_toml", &train::RunConfig::from_toml, py::arg("text"), py::arg("origin"))
      .def("validate", &train::RunConfig::validate);

  py::class_<data::Tokenizer>(m, "Tokenizer", py::module_local())
      .def_static("bytes", &data::Tokenizer::bytes)
      .def_static("load", &data::Tokenizer::load, py::arg("path"))
      .def_static(
          "from_serialized",
          [](const py::bytes& proto, const std::string& origin) {
            return data::Tokenizer::from_serialized(std::string(proto), origin);
          },
          py::arg("proto"), py::arg("origin"))
      .def_property_readonly("vocab_size", &data::Tokenizer::vocab_size)
      .def_property_readonly("name", &data::Tokenizer::name)
      .def_property_readonly("is_bytes", &data::Tokenizer::is_bytes)
      .def("encode", &data::Tokenizer::encode, py::arg("text"))
      // str; bytes that are not UTF-8 (a byte-level piece of a character) become U+FFFD.
      .def(
          "decode",
          [](const data::Tokenizer& t, const data::TokenIds& ids) {
            const std::string text = t.decode(ids);
            PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                                               "replace");
            if (!s) throw py::error_already_set();
            return py::reinterpret_steal<py::str>(s);
          },
          py::arg("ids"))
      .def("serialized",
           [](const data::Tokenizer& t) { return py::bytes(t.serialized()); });

  // (model handle, RunConfig, Tokenizer) from a configuration request, as `seqmix train`
  // resolves one: preset, then a TOML file, then the tokenizer, then overrides.
  m.def(
      "build_run",
      [](const std::string& config_path, const std::string& tokenizer,
         const std::vector<std::string>& overrides) {
        train::RunRequest request;
        request.config_path = config_path;
        request.tokenizer = tokenizer;
        request.overrides.assign(overrides.begin(), overrides.end());
        train::LoadedRun run;
        run.config = train::resolve_run(request);
        run.tokenizer = train::resolve_tokenizer(run.config);
        run.model = models::SequenceModel(run.config.model);
        return loaded(std::move(run));
      },
      py::arg("config_path"), py::arg("tokenizer"), py::arg("overrides"));
  // A C++ model of a resolved configuration (its weights freshly drawn): what Model.save,
  // Model.evaluate and the checks of seqmix.load copy a Python model's state dict into.
  m.def(
      "model_from_config",
      [](const train::RunConfig& config) -> ModulePtr {
        return models::SequenceModel(config.model).ptr();
      },
      py::arg("config"));
  // `seqmix train` in this process: the same run layer (a data-parallel worker when torchrun's
  // variables are set). SIGINT / SIGTERM checkpoint and stop while it runs, as on the command
  // line; Python's own handlers are put back afterwards.
  m.def(
      "train_run",
      [](const std::string& out_dir, const std::string& config_path,
         const std::string& tokenizer, const std::vector<std::string>& overrides, bool resume,
         bool overwrite, double dist_timeout_s, bool allow_data_change) {
        if (!(dist_timeout_s >= 1 && dist_timeout_s <= 86400))
          throw std::invalid_argument("dist_timeout: must be a number of seconds in [1, 86400]");
        struct sigaction old_int {}, old_term {}, old_hup {};
        sigaction(SIGINT, nullptr, &old_int);
        sigaction(SIGTERM, nullptr, &old_term);
        sigaction(SIGHUP, nullptr, &old_hup);
        struct Restore {
          struct sigaction *i, *t, *h;
          ~Restore() {
            sigaction(SIGINT, i, nullptr);
            sigaction(SIGTERM, t, nullptr);
            sigaction(SIGHUP, h, nullptr);
          }
        } restore{&old_int, &old_term, &old_hup};
        py::gil_scoped_release release;
        std::shared_ptr<dist::ProcessGroup> group;
        const dist::LaunchEnv env = dist::LaunchEnv::from_environment();
        // From here on Ctrl-C asks the trainer to stop (a worker ignores a repeat within a
        // second: torchrun forwards the terminal's Ctrl-C too).
        util::reset_stop_signal();
        util::install_stop_signals(env.distributed() ? 1.0 : 0.0);
        if (env.distributed())
          group = dist::ProcessGroup::create(
              env, std::chrono::milliseconds(static_cast<int64_t>(dist_timeout_s * 1000)));
        train::TrainingRequest request;
        request.config.config_path = config_path;
        request.config.tokenizer = tokenizer;
        request.config.overrides.assign(overrides.begin(), overrides.end());
        request.out_dir = out_dir;
        request.resume = resume;
        request.overwrite = overwrite;
        request.allow_data_change = allow_data_change;
        request.group = group;
        const auto [config, r] = train::run_training(request);
        nlohmann::json j{{"steps", r.steps},           {"train_loss", r.final_train_loss},
                         {"loss", r.eval_loss},        {"perplexity", r.eval_perplexity},
                         {"bpc", r.eval_bpc},          {"seconds", r.seconds},
                         {"rank", group ? group->rank() : 0},
                         {"world_size", group ? group->world_size() : 1}};
        if (!config.data.task.empty()) {
          j["valid_accuracy"] = r.eval_accuracy;
          j["test_accuracy"] = r.test_accuracy;
          j["test_majority"] = r.test_majority;
          j["test_loss"] = r.test_loss;
          j["train_accuracy"] = r.train_accuracy;
        }
        return j.dump();
      },
      py::arg("out_dir"), py::arg("config_path"), py::arg("tokenizer"), py::arg("overrides"),
      py::arg("resume"), py::arg("overwrite"), py::arg("dist_timeout_s"),
      py::arg("allow_data_change"));
  m.def(
      "load_run", [](const std::string& path) { return loaded(train::load_run(path)); },
      py::arg("path"));
  // A `seqmix export` file (bare state dicts are read by seqmix.load in Python).
  m.def(
      "load_export",
      [](const std::string& file) { return loaded(train::load_export(file, nullptr)); },
      py::arg("file"));
  // What a model path is (train::model_file_kind), for seqmix.load to dispatch on.
  m.def(
      "model_file_kind",
      [](const std::string& path) -> std::string {
        switch (train::model_file_kind(path)) {
          case train::ModelFileKind::kMissing: return "missing";
          case train::ModelFileKind::kRunFolder: return "run";
          case train::ModelFileKind::kFolder: return "folder";
          case train::ModelFileKind::kSpecial: return "special";
          case train::ModelFileKind::kCheckpoint: return "checkpoint";
          case train::ModelFileKind::kExport: return "export";
          case train::ModelFileKind::kOther: return "other";
        }
        return "other";
      },
      py::arg("path"));
  // seqmix.load of a bare state dict: the loader (and checks) of `seqmix import`.
  m.def(
      "load_state_dict",
      [](const ModulePtr& module, const std::vector<std::pair<std::string, at::Tensor>>& state,
         const std::string& what) {
        models::SequenceModel model = model_of(module);
        train::load_state_dict(model, state, what);
      },
      py::arg("model"), py::arg("state"), py::arg("what"));
  m.def(
      "save_run",
      [](const std::string& out_dir, const ModulePtr& module, const train::RunConfig& config,
         const data::Tokenizer& tokenizer, int64_t step, bool overwrite) {
        models::SequenceModel model = model_of(module);
        train::save_run(out_dir, model, config, tokenizer, step, overwrite);
      },
      py::arg("out_dir"), py::arg("model"), py::arg("config"), py::arg("tokenizer"),
      py::arg("step"), py::arg("overwrite"));
  m.def(
      "export_run",
      [](const std::string& run, const std::string& out_file, bool overwrite) {
        train::export_run(run, out_file, overwrite);
      },
      py::arg("run"), py::arg("out_file"), py::arg("overwrite"));

  // Sampling with incremental decoding (generate/sampler.h); the GIL is released while the
  // C++ loop runs.
  m.def(
      "generate_tokens",
      [](const ModulePtr& module, const data::TokenIds& prompt, int64_t max_new_tokens,
         double temperature, int64_t top_k, double top_p, uint64_t seed) {
        models::SequenceModel model = model_of(module);
        const generate::SamplingOptions options = sampling(temperature, top_k, top_p);
        return interruptible(
            [&] { return generate::generate_tokens(model, prompt, max_new_tokens, options, seed); });
      },
      py::arg("model"), py::arg("prompt"), py::arg("max_new_tokens"), py::arg("temperature"),
      py::arg("top_k"), py::arg("top_p"), py::arg("seed"));
  m.def(
      "prompt_note",
      [](const ModulePtr& module, int64_t prompt_tokens, const std::string& unit) {
        models::SequenceModel model = model_of(module);
        return generate::prompt_note(model, prompt_tokens, unit);
      },
      py::arg("model"), py::arg("prompt_tokens"), py::arg("unit"));
  m.def(
      "generate_text",
      [](const ModulePtr& module, const data::Tokenizer& tokenizer, const std::string& prompt,
         int64_t max_new_tokens, double temperature, int64_t top_k, double top_p,
         uint64_t seed) {
        models::SequenceModel model = model_of(module);
        const generate::SamplingOptions options = sampling(temperature, top_k, top_p);
        const std::string text = interruptible([&] {
          return generate::generate_text(model, tokenizer, prompt, max_new_tokens, options, seed);
        });
        // Bytes, not str: a byte-level model may stop inside a UTF-8 sequence.
        return py::bytes(text);
      },
      py::arg("model"), py::arg("tokenizer"), py::arg("prompt"), py::arg("max_new_tokens"),
      py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("seed"));

  // `seqmix eval` on a loaded run: the held-out split its configuration names (or `data`,
  // `split`), scored with the training objective. Returns the same figures the CLI prints.
  m.def(
      "evaluate",
      [](const ModulePtr& module, train::RunConfig config, const data::Tokenizer& tokenizer,
         const std::string& data, const std::string& split, int64_t batch_size,
         const std::string& device) {
        models::SequenceModel model = model_of(module);
        model->to(util::require_device(device, "device"));
        train::EvalRequest request;
        request.run = "model";
        request.data = data;
        request.split = split;
        train::EvalSet set = train::load_eval_set(config, tokenizer, request);
        if (set.classification)
          throw py::value_error(
              "evaluate: this model is a classifier; use classify() on its task's examples");
        const train::EvalResult r =
            interruptible([&] { return train::evaluate(model, set.tokens, tokenizer, batch_size); });
        py::dict out;
        out["split"] = set.split;
        out["loss"] = r.loss;
        out["perplexity"] = r.perplexity;
        out["bpc"] = r.bpc;
        out["tokens"] = r.tokens;
        out["bytes"] = r.bytes;
        out["seconds"] = r.seconds;
        return out;
      },
      py::arg("model"), py::arg("config"), py::arg("tokenizer"), py::arg("data"),
      py::arg("split"), py::arg("batch_size"), py::arg("device") = "cpu");

  // `seqmix bench ops` in this process, so that python -m seqmix.bench compares a Python
  // call with the C++ one under the same allocator, threads and machine state.
  m.def(
      "run_ops_bench",
      [](const std::vector<int64_t>& lengths, int64_t batch, int64_t d_model, int64_t n_heads,
         int64_t reps, const std::vector<std::string>& ops) {
        bench::OpsBenchOptions o;
        o.lengths = lengths;
        o.batch = batch;
        o.d_model = d_model;
        o.n_heads = n_heads;
        o.reps = reps;
        o.ops = ops;
        std::vector<nlohmann::json> rows;
        {
          py::gil_scoped_release release;
          bench::run_ops_bench(o, [&](const nlohmann::json& j) { rows.push_back(j); });
        }
        py::list out;
        for (const auto& j : rows) out.append(to_python(j));
        return out;
      },
      py::arg("lengths"), py::arg("batch"), py::arg("d_model"), py::arg("n_heads"),
      py::arg("reps"), py::arg("ops"));
}

}  // namespace seqmix::python
