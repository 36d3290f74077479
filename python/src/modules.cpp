// seqmix._C: the layers (include/seqmix/nn/*.h) and whole models (models/sequence_model.h)
// as handles on the C++ modules, with their forward calls: the C++ side of the tests that
// check seqmix.nn's layers (Python modules of their own) against them -- names,
// initialisation, outputs -- and of the models' C++ twins (python/seqmix/_api.py).
#include <sstream>

#include "bindings.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/nn/aib_attention.h"
#include "seqmix/nn/block.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/nn/feed_forward.h"
#include "seqmix/nn/self_attention.h"

namespace seqmix::python {
namespace {

namespace sn = seqmix::nn;
namespace so = seqmix::ops;

template <typename Dict>
std::vector<std::pair<std::string, at::Tensor>> items(const Dict& dict) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace

void bind_modules(py::module_& m) {
  // A handle on any C++ module. module_local: LibTorch's own Python bindings register
  // torch::nn::Module too, for their own purposes.
  py::class_<torch::nn::Module, ModulePtr>(m, "Module", py::module_local())
      .def("named_parameters",
           [](torch::nn::Module& self) { return items(self.named_parameters(false)); })
      .def("named_buffers",
           [](torch::nn::Module& self) { return items(self.named_buffers(false)); })
      .def("named_children",
           [](torch::nn::Module& self) {
             std::vector<std::pair<std::string, ModulePtr>> out;
             for (const auto& item : self.named_children()) out.emplace_back(item.key(), item.value());
             return out;
           })
      .def("train", [](torch::nn::Module& self, bool mode) { self.train(mode); })
      .def_property_readonly("training", &torch::nn::Module::is_training)
      .def_property_readonly("type_name", &torch::nn::Module::name)
      .def("__repr__", [](torch::nn::Module& self) {
        std::ostringstream os;
        self.pretty_print(os);
        return os.str();
      });

  // ---- layers ---------------------------------------------------------------------------
  m.def(
      "aib_attention",
      [](int64_t d_model, int64_t max_len, bool causal, const std::string& weights,
         bool bias_av, const std::string& impl, int64_t n_layers) -> ModulePtr {
        return sn::AIBAttention(sn::AIBAttentionOptions(d_model, max_len)
                                    .causal(causal)
                                    .weights(so::parse_aib_weights(weights))
                                    .bias_av(bias_av)
                                    .backend(so::parse_backend(impl))
                                    .n_layers(n_layers))
            .ptr();
      },
      py::arg("d_model"), py::arg("max_len"), py::arg("causal"), py::arg("weights"),
      py::arg("bias_av"), py::arg("impl"), py::arg("n_layers"));
  m.def(
      "self_attention",
      [](int64_t d_model, int64_t n_heads, bool causal, double dropout, bool bias,
         const std::string& impl, int64_t n_layers) -> ModulePtr {
        return sn::SelfAttention(sn::SelfAttentionOptions(d_model, n_heads)
                                     .causal(causal)
                                     .dropout(dropout)
                                     .bias(bias)
                                     .backend(so::parse_backend(impl))
                                     .n_layers(n_layers))
            .ptr();
      },
      py::arg("d_model"), py::arg("n_heads"), py::arg("causal"), py::arg("dropout"),
      py::arg("bias"), py::arg("impl"), py::arg("n_layers"));
  auto ces_options = [](int64_t channels, bool bidirectional, double r_min, double r_max,
                        double max_phase, double dt_min, double dt_max, double max_lambda,
                        const std::string& shortcut, bool normalize, const std::string& impl) {
    return sn::CESOptions(channels)
        .bidirectional(bidirectional)
        .r_min(r_min)
        .r_max(r_max)
        .max_phase(max_phase)
        .dt_min(dt_min)
        .dt_max(dt_max)
        .max_lambda(max_lambda)
        .shortcut(sn::parse_ces_shortcut(shortcut))
        .normalize(normalize)
        .backend(so::parse_backend(impl));
  };
  m.def(
      "ces",
      [ces_options](int64_t channels, bool bidirectional, double r_min, double r_max,
                    double max_phase, double dt_min, double dt_max, double max_lambda,
                    const std::string& shortcut, bool normalize,
                    const std::string& impl) -> ModulePtr {
        return sn::CES(ces_options(channels, bidirectional, r_min, r_max, max_phase, dt_min,
                                   dt_max, max_lambda, shortcut, normalize, impl))
            .ptr();
      },
      py::arg("channels"), py::arg("bidirectional"), py::arg("r_min"), py::arg("r_max"),
      py::arg("max_phase"), py::arg("dt_min"), py::arg("dt_max"), py::arg("max_lambda"),
      py::arg("shortcut"), py::arg("normalize"), py::arg("impl"));
  m.def(
      "esmlp",
      [ces_options](int64_t d_model, int64_t d_hidden, bool causal, bool gate, double r_min,
                    double r_max, double max_phase, double dt_min, double dt_max,
                    double max_lambda, const std::string& shortcut, bool normalize,
                    const std::string& impl) -> ModulePtr {
        return sn::ESMLP(sn::ESMLPOptions(d_model, d_hidden)
                             .causal(causal)
                             .gate(gate)
                             .ces(ces_options(d_hidden, !causal, r_min, r_max, max_phase,
                                              dt_min, dt_max, max_lambda, shortcut, normalize,
                                              impl)))
            .ptr();
      },
      py::arg("d_model"), py::arg("d_hidden"), py::arg("causal"), py::arg("gate"),
      py::arg("r_min"), py::arg("r_max"), py::arg("max_phase"), py::arg("dt_min"),
      py::arg("dt_max"), py::arg("max_lambda"), py::arg("shortcut"), py::arg("normalize"),
      py::arg("impl"));
  m.def(
      "extractor",
      [](int64_t d_model, int64_t max_len, bool adjust, bool out_proj, const std::string& impl,
         int64_t n_layers) -> ModulePtr {
        return sn::Extractor(sn::ExtractorOptions(d_model, max_len)
                                 .adjust(adjust)
                                 .out_proj(out_proj)
                                 .backend(so::parse_backend(impl))
                                 .n_layers(n_layers))
            .ptr();
      },
      py::arg("d_model"), py::arg("max_len"), py::arg("adjust"), py::arg("out_proj"),
      py::arg("impl"), py::arg("n_layers"));
  m.def(
      "block",
      [](const ModulePtr& mixer, int64_t d_model, int64_t d_ff, const std::string& activation,
         bool ffn_bias, bool pre_norm, double dropout, bool norm, bool with_ffn,
         const std::string& norm_type, int64_t n_layers) -> ModulePtr {
        auto mx = as<sn::MixerImpl>(mixer, "a seqmix mixer");
        sn::FeedForwardOptions ffn(d_model, with_ffn ? d_ff : 1);
        ffn.activation(sn::parse_activation(activation))
            .dropout(dropout)
            .bias(ffn_bias)
            .n_layers(n_layers);
        return sn::Block(mx, ffn, pre_norm, dropout, norm, with_ffn, norm_type).ptr();
      },
      py::arg("mixer"), py::arg("d_model"), py::arg("d_ff"), py::arg("activation"), py::arg("ffn_bias"),
      py::arg("pre_norm"), py::arg("dropout"), py::arg("norm"), py::arg("with_ffn"),
      py::arg("norm_type"), py::arg("n_layers"));

  // Forward of any mixer (AIB attention, self-attention, ESMLP, the Extractor), of CES and
  // of a block: x [B, L, D], mask [B, L] bool or None -> [B, L, D].
  m.def(
      "mixer_forward",
      [](const ModulePtr& module, const at::Tensor& x, const c10::optional<at::Tensor>& mask) {
        return as<sn::MixerImpl>(module, "a seqmix mixer")->forward(x, or_undefined(mask));
      },
      py::arg("module"), py::arg("x"), py::arg("mask"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "ces_forward",
      [](const ModulePtr& module, const at::Tensor& x, const c10::optional<at::Tensor>& mask) {
        return as<sn::CESImpl>(module, "seqmix CES")->forward(x, or_undefined(mask));
      },
      py::arg("module"), py::arg("x"), py::arg("mask"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "block_forward",
      [](const ModulePtr& module, const at::Tensor& x, const c10::optional<at::Tensor>& mask) {
        return as<sn::BlockImpl>(module, "a seqmix Block")->forward(x, or_undefined(mask));
      },
      py::arg("module"), py::arg("x"), py::arg("mask"), py::call_guard<py::gil_scoped_release>());

  // ---- whole models ----------------------------------------------------------------------
  using models::SequenceModelImpl;
  m.def(
      "model_forward",
      [](const ModulePtr& module, const at::Tensor& tokens, const c10::optional<at::Tensor>& mask) {
        return as<SequenceModelImpl>(module, "a seqmix model")->forward(tokens, or_undefined(mask));
      },
      py::arg("model"), py::arg("tokens"), py::arg("mask"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "model_hidden",
      [](const ModulePtr& module, const at::Tensor& tokens, const c10::optional<at::Tensor>& mask) {
        return as<SequenceModelImpl>(module, "a seqmix model")->hidden(tokens, or_undefined(mask));
      },
      py::arg("model"), py::arg("tokens"), py::arg("mask"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "model_pooled",
      [](const ModulePtr& module, const at::Tensor& tokens, const c10::optional<at::Tensor>& mask) {
        return as<SequenceModelImpl>(module, "a seqmix model")->pooled(tokens, or_undefined(mask));
      },
      py::arg("model"), py::arg("tokens"), py::arg("mask"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "model_classify",
      [](const ModulePtr& module, const at::Tensor& tokens, const c10::optional<at::Tensor>& mask) {
        return as<SequenceModelImpl>(module, "a seqmix model")
            ->classify(tokens, or_undefined(mask));
      },
      py::arg("model"), py::arg("tokens"), py::arg("mask"),
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace seqmix::python
