// The seqmix._C extension module: python/seqmix/ imports it; users import seqmix, not this.
#include <stdexcept>

#include "bindings.h"
#include "seqmix/generate/sampler.h"
#include "seqmix/ops/common.h"
#include "seqmix/train/trainer.h"
#include "seqmix/util/paths.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "seqmix's C++ library (libseqmix) for the seqmix Python package";
  m.attr("__version__") = SEQMIX_VERSION;
  // torch.__version__ of the environment it was compiled in (python/CMakeLists.txt).
  m.attr("TORCH_VERSION") = SEQMIX_TORCH_BUILD_VERSION;
  m.attr("MAX_NEW_TOKENS") = seqmix::generate::kMaxNewTokens;
  // Whether libseqmix holds the CUDA kernels (docs/CUDA.md): without them no model runs on a
  // GPU, and device='cuda' is refused.
  m.attr("CUDA_KERNELS") = seqmix::ops::cuda_kernels_built();
  // LibTorch's checks (TORCH_CHECK) throw c10::Error, whose what() carries a C++ backtrace:
  // Python users get the message alone, as the exception type Python code expects. Local:
  // it applies to this module's functions only (pybind11's global list is shared with
  // torch._C and every other extension of the same pybind11 build).
  py::register_local_exception_translator([](std::exception_ptr p) {
    // Every message as a terminal may show it (escape sequences from a crafted file's
    // names written out, megabytes cut): util::message_text.
    auto raise = [](PyObject* type, const std::string& what) {
      PyErr_SetString(type, seqmix::util::message_text(what).c_str());
    };
    try {
      if (p) std::rethrow_exception(p);
    } catch (const seqmix::train::Interrupted& e) {
      // seqmix.train stopped by Ctrl-C / SIGTERM after a checkpoint: what Python raises for
      // Ctrl-C, with the resume line.
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    } catch (const c10::IndexError& e) {
      raise(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      raise(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::TypeError& e) {
      raise(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      raise(PyExc_RuntimeError, e.what_without_backtrace());
    } catch (const std::logic_error& e) {
      // std::invalid_argument and std::domain_error are users' bad values (pybind11 maps them
      // to ValueError too); other logic errors say what a call cannot do (an encoder asked to
      // decode step by step).
      if (dynamic_cast<const std::invalid_argument*>(&e) ||
          dynamic_cast<const std::domain_error*>(&e) ||
          dynamic_cast<const std::out_of_range*>(&e) || dynamic_cast<const std::length_error*>(&e))
        raise(PyExc_ValueError, e.what());
      else
        raise(PyExc_RuntimeError, e.what());
    } catch (const py::builtin_exception& e) {
      e.set_error();  // py::value_error and its kin, as pybind11 raises them
    } catch (const std::runtime_error& e) {
      // A LibTorch error wrapped into another exception keeps its C++ backtrace in what().
      std::string what = e.what();
      if (const auto trace = what.find("\nException raised from "); trace != std::string::npos)
        what.resize(trace);
      raise(PyExc_RuntimeError, what);
    }
  });
  seqmix::python::bind_ops(m);
  seqmix::python::bind_modules(m);
  seqmix::python::bind_runs(m);
}
