#pragma once
// Shared by the translation units of the seqmix._C extension (python/src/).
#include <torch/extension.h>

#include <pybind11/stl.h>

namespace py = pybind11;

namespace seqmix::python {

void bind_ops(py::module_& m);     // ops.cpp: seqmix.ops
void bind_modules(py::module_& m);  // modules.cpp: seqmix.nn and whole models
void bind_runs(py::module_& m);     // runs.cpp: configurations, runs, tokenizers, bench

}  // namespace seqmix::python
