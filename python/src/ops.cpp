// seqmix._C: the ops' helpers (include/seqmix/ops/*.h) as Python functions. The ops themselves
// are in PyTorch's dispatcher (torch.ops.seqmix.*), registered when this module loads
// libseqmix; python/seqmix/ops.py wraps them with keyword options, checks and docstrings.
#include "bindings.h"

#include <algorithm>

#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/attention.h"
#include "seqmix/ops/ces_scan.h"
#include "seqmix/ops/extractor_conv.h"
#include "seqmix/ops/op_cases.h"

#include <torch/csrc/jit/python/pybind_utils.h>

namespace seqmix::python {
namespace so = seqmix::ops;

void bind_ops(py::module_& m) {
  m.def("aib_num_levels", &so::aib_num_levels, py::arg("max_len"));
  m.def(
      "aib_level_weights",
      [](const at::Tensor& w, const std::string& weights) {
        return so::aib_level_weights(w, so::parse_aib_weights(weights));
      },
      py::arg("w"), py::arg("weights"));

  m.def(
      "ces_coefficients",
      [](const at::Tensor& log_lambda, const at::Tensor& log_alpha, const at::Tensor& log_beta,
         double max_lambda, bool normalize) {
        const so::CESCoefficients c =
            so::ces_coefficients(log_lambda, log_alpha, log_beta, max_lambda, normalize);
        return py::make_tuple(c.q, c.mu, c.c);
      },
      py::arg("log_lambda"), py::arg("log_alpha"), py::arg("log_beta"), py::arg("max_lambda"),
      py::arg("normalize"));

  // The op-case registry (op_cases.h), for torch.library.opcheck in the tests.
  m.def("op_cases", [] {
    py::list out;
    for (const auto& c : so::op_cases()) out.append(py::make_tuple(c.name(), c.op, c.gradcheck));
    return out;
  });
  m.def(
      "op_case_args",
      [](const std::string& name, const std::string& dtype, uint64_t seed) {
        const auto& cases = so::op_cases();
        const auto it = std::find_if(cases.begin(), cases.end(),
                                     [&](const so::OpCase& c) { return c.name() == name; });
        if (it == cases.end()) throw std::invalid_argument("unknown op case '" + name + "'");
        if (dtype != "float32" && dtype != "float64")
          throw std::invalid_argument("dtype: expected float32 or float64, got '" + dtype + "'");
        const so::OpInputs in = it->make_inputs(dtype == "float32" ? at::kFloat : at::kDouble, seed);
        // Leaves: the arguments as the op receives them, floating ones requiring grad.
        py::list args;
        for (const c10::IValue& v : it->op_args(in.values(), in.mask)) {
          if (v.isTensor()) {
            at::Tensor t = v.toTensor().detach();
            if (at::isFloatingType(t.scalar_type())) t.requires_grad_(true);
            args.append(torch::jit::toPyObject(c10::IValue(t)));
          } else {
            args.append(torch::jit::toPyObject(v));
          }
        }
        return py::tuple(args);
      },
      py::arg("name"), py::arg("dtype"), py::arg("seed"));
}

}  // namespace seqmix::python
