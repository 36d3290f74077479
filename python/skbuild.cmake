# Run before project(seqmix) when pip builds the package (pyproject.toml names this file in
# CMAKE_PROJECT_seqmix_INCLUDE_BEFORE). A PyTorch extension works only with the torch it was
# compiled against, so the build takes torch from the interpreter pip installs for
# (Python_EXECUTABLE, given by scikit-build-core), never from the source tree's .venv/ that
# cmake/SeqmixTorch.cmake would otherwise fall back to.
if(NOT Python_EXECUTABLE)
  message(FATAL_ERROR "seqmix: python/skbuild.cmake is for builds by scikit-build-core "
                      "(pip install --no-build-isolation .), which sets Python_EXECUTABLE")
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
          "import pybind11, torch; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE _seqmix_skb_out OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _seqmix_skb_rc ERROR_VARIABLE _seqmix_skb_err
  ERROR_STRIP_TRAILING_WHITESPACE)
if(NOT _seqmix_skb_rc EQUAL 0)
  # pip's default build isolation hides the environment's packages from the build; building
  # against a torch downloaded for the build instead could differ from the one the package
  # then runs with, so that is refused rather than attempted.
  string(REGEX REPLACE ".*\n([^\n]+)$" "\\1" _seqmix_skb_err "${_seqmix_skb_err}")
  message(FATAL_ERROR
    "seqmix is built against the PyTorch installed in the environment it is installed into, "
    "but the build's Python (${Python_EXECUTABLE}) cannot import torch and pybind11 "
    "(${_seqmix_skb_err}). Install torch>=2.11, pybind11 and scikit-build-core into that "
    "environment first, then build without pip's build isolation:\n"
    "  pip install --no-build-isolation .        (or -e . ; or: "
    "pip wheel --no-build-isolation --no-deps .)")
endif()
string(REPLACE "\n" ";" _seqmix_skb_out "${_seqmix_skb_out}")
list(GET _seqmix_skb_out 0 _seqmix_skb_prefix)
list(GET _seqmix_skb_out 1 _seqmix_skb_torch)

# Resolved, so that an environment which reaches the same torch through a link builds with
# the same paths (and the same ccache entries).
file(REAL_PATH "${_seqmix_skb_prefix}/Torch" _seqmix_skb_torch_dir)
# build-pip/ persists between builds, and its cache holds the LibTorch it found first. A
# build for an environment with another torch must not reuse those objects.
if(DEFINED CACHE{Torch_DIR})
  file(REAL_PATH "${Torch_DIR}" _seqmix_skb_cached_dir)
  if(NOT _seqmix_skb_cached_dir STREQUAL _seqmix_skb_torch_dir)
    message(FATAL_ERROR
      "seqmix: this build folder (${CMAKE_BINARY_DIR}) was configured for the torch in "
      "${Torch_DIR}, but ${Python_EXECUTABLE} has torch ${_seqmix_skb_torch} in "
      "${_seqmix_skb_torch_dir}. Remove the folder, give another one "
      "(pip --config-settings=build-dir=build-pip-2), or pass "
      "--config-settings=cmake.fresh=true")
  endif()
endif()
set(SEQMIX_PYTHON "${Python_EXECUTABLE}" CACHE FILEPATH
    "The Python interpreter whose PyTorch seqmix builds against" FORCE)
set(Torch_DIR "${_seqmix_skb_torch_dir}" CACHE PATH "LibTorch's CMake package" FORCE)
message(STATUS "seqmix: building the wheel against torch ${_seqmix_skb_torch} of "
               "${Python_EXECUTABLE}")
