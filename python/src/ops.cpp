// seqmix._C: the ops (include/seqmix/ops/*.h) as Python functions. Each is the C++ op itself,
// a torch::autograd::Function or ATen code, so Python autograd runs the C++ backward. The
// keyword arguments, their checks and the docstrings users read are in python/seqmix/ops.py;
// here the arguments arrive positionally, already named and checked. The GIL is released
// while an op computes (other Python threads run; LibTorch's own ops do the same).
#include "bindings.h"

#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/attention.h"
#include "seqmix/ops/ces_scan.h"
#include "seqmix/ops/extractor_conv.h"

namespace seqmix::python {
namespace {

namespace so = seqmix::ops;

so::CESCoefficients coefficients(const at::Tensor& q, const at::Tensor& mu, const at::Tensor& c) {
  return so::CESCoefficients{q, mu, c};
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def(
      "aib_scan",
      [](const at::Tensor& a, const at::Tensor& v, const c10::optional<at::Tensor>& w,
         const c10::optional<at::Tensor>& mask, const std::string& direction,
         const std::string& weights, const std::string& impl) {
        return so::aib_scan(a, v, or_undefined(w), or_undefined(mask),
                            so::parse_direction(direction), so::parse_aib_weights(weights),
                            so::parse_backend(impl));
      },
      py::arg("a"), py::arg("v"), py::arg("w"), py::arg("mask"), py::arg("direction"),
      py::arg("weights"), py::arg("impl"), py::call_guard<py::gil_scoped_release>());
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
  m.def(
      "ces_scan",
      [](const at::Tensor& x, const at::Tensor& q, const at::Tensor& mu, const at::Tensor& c,
         const c10::optional<at::Tensor>& mask, const std::string& direction,
         const std::string& impl) {
        return so::ces_scan(x, coefficients(q, mu, c), or_undefined(mask),
                            so::parse_direction(direction), so::parse_backend(impl));
      },
      py::arg("x"), py::arg("q"), py::arg("mu"), py::arg("c"), py::arg("mask"),
      py::arg("direction"), py::arg("impl"), py::call_guard<py::gil_scoped_release>());

  m.def(
      "attention",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const c10::optional<at::Tensor>& key_mask, const std::string& direction,
         const std::string& impl) {
        return so::attention(q, k, v, or_undefined(key_mask), so::parse_direction(direction),
                             so::parse_backend(impl));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("key_mask"), py::arg("direction"),
      py::arg("impl"), py::call_guard<py::gil_scoped_release>());

  m.def(
      "extractor_conv",
      [](const at::Tensor& x, const at::Tensor& w, const std::string& impl) {
        return so::extractor_conv(x, w, so::parse_backend(impl));
      },
      py::arg("x"), py::arg("w"), py::arg("impl"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace seqmix::python
