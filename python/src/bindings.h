#pragma once
// Shared by the translation units of the seqmix._C extension (python/src/).
#include <torch/extension.h>

#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "seqmix/util/signals.h"

namespace py = pybind11;

namespace seqmix::python {

using ModulePtr = std::shared_ptr<torch::nn::Module>;

// An optional tensor argument (None from Python) as the undefined tensor the ops take.
inline at::Tensor or_undefined(const c10::optional<at::Tensor>& t) {
  return t ? *t : at::Tensor();
}

// A module handle as the C++ type a call needs; a TypeError (not a crash) for any other.
template <typename T>
std::shared_ptr<T> as(const ModulePtr& module, const char* what) {
  auto p = std::dynamic_pointer_cast<T>(module);
  if (!p) throw py::type_error(std::string("expected ") + what + ", got the C++ module '" +
                               (module ? module->name() : std::string("None")) + "'");
  return p;
}

// Runs `work` (long C++ work: generation, evaluation) with the GIL released, stoppable by
// Ctrl-C: the library's check_interrupt() points take the GIL and run Python's signal
// handlers; when one raises (KeyboardInterrupt), the work stops there and the Python
// exception propagates from the call.
template <typename F>
auto interruptible(F&& work) -> decltype(work()) {
  struct Raised {};  // a Python error is set; no Python object crosses the released region
  try {
    util::ScopedInterruptCheck check([] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw Raised{};
    });
    py::gil_scoped_release release;
    return work();
  } catch (const Raised&) {
    throw py::error_already_set();
  }
}

void bind_ops(py::module_& m);     // ops.cpp: seqmix.ops
void bind_modules(py::module_& m);  // modules.cpp: seqmix.nn and whole models
void bind_runs(py::module_& m);     // runs.cpp: configurations, runs, tokenizers, bench

}  // namespace seqmix::python
