// seqmix._C: the mixer and op-case registries as Python functions. The ops themselves are in
// PyTorch's dispatcher (torch.ops.seqmix.*), registered when this module loads libseqmix;
// python/seqmix/ops.py wraps them with keyword options, checks and docstrings, and the
// helpers beside them (aib_num_levels, ces_coefficients) are Python, shared with the layers
// (python/seqmix/mixers/).
#include "bindings.h"

#include <algorithm>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/ops/op_cases.h"

#include <torch/csrc/jit/python/pybind_utils.h>

namespace seqmix::python {
namespace so = seqmix::ops;

void bind_ops(py::module_& m) {
  // The mixer registry (models/mixer_registry.h), in its order: what the Python layers'
  // own registry (seqmix/_mixer.py) is checked against when the extension loads.
  m.def("mixers", [] {
    py::list out;
    for (const auto& spec : seqmix::models::mixer_registry()) {
      py::list keys;
      for (const auto& f : spec.fields) keys.append(f.name);
      py::dict row;
      row["name"] = spec.name;
      row["section"] = spec.section;
      row["keys"] = keys;
      row["causal"] = spec.causal;
      row["bidirectional"] = spec.bidirectional;
      row["has_ffn"] = spec.has_ffn;
      out.append(row);
    }
    return out;
  });

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
