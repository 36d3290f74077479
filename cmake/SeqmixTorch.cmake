# Finds the one PyTorch seqmix supports, from the Python environment it is installed in
# (scripts/setup.sh makes .venv/ with torch from PyPI; the wheel carries LibTorch's headers,
# libraries and CMake package). Used by seqmix's own CMakeLists.txt and by its installed
# package (seqmixConfig.cmake), so that a program linking libseqmix.a finds the same Torch.
#
# In:  SEQMIX_PYTHON (cache): the interpreter whose torch to use. Default: the source tree's
#      .venv/bin/python when building seqmix, python3 on PATH otherwise. Torch_DIR, if set,
#      is used as it is.
# Out: the targets and variables of find_package(Torch) (TORCH_LIBRARIES, ...),
#      SEQMIX_TORCH_VERSION, SEQMIX_TORCH_LIB_DIR (the folder of libtorch_cpu.so),
#      SEQMIX_PYTHON (the interpreter, for the Python package and the tests).

set(SEQMIX_TORCH_MIN_VERSION 2.11.0)

if(NOT SEQMIX_PYTHON)
  if(DEFINED SEQMIX_SOURCE_VENV AND EXISTS "${SEQMIX_SOURCE_VENV}/bin/python")
    set(_seqmix_python_default "${SEQMIX_SOURCE_VENV}/bin/python")
  else()
    find_program(_seqmix_python_default NAMES python3 python)
  endif()
  set(SEQMIX_PYTHON "${_seqmix_python_default}" CACHE FILEPATH
      "The Python interpreter whose PyTorch seqmix builds against")
endif()

if(NOT Torch_DIR)
  execute_process(
    COMMAND "${SEQMIX_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _seqmix_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _seqmix_torch_rc ERROR_QUIET)
  if(NOT _seqmix_torch_rc EQUAL 0 OR NOT _seqmix_torch_prefix)
    message(FATAL_ERROR "seqmix: '${SEQMIX_PYTHON}' cannot import torch; run "
                        "scripts/setup.sh, or pass -DSEQMIX_PYTHON=<a python with torch "
                        ">= ${SEQMIX_TORCH_MIN_VERSION}>")
  endif()
  set(Torch_DIR "${_seqmix_torch_prefix}/Torch" CACHE PATH "LibTorch's CMake package")
endif()

# The version check comes before find_package(Torch), so an old Torch is refused in one line
# rather than by whatever its package fails on first.
if(NOT EXISTS "${Torch_DIR}/TorchConfigVersion.cmake")
  message(FATAL_ERROR "seqmix: no LibTorch CMake package in Torch_DIR='${Torch_DIR}'")
endif()
file(STRINGS "${Torch_DIR}/TorchConfigVersion.cmake" _seqmix_torch_version_line
     REGEX "set\\(PACKAGE_VERSION \"")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" SEQMIX_TORCH_VERSION "${_seqmix_torch_version_line}")
if(NOT SEQMIX_TORCH_VERSION OR SEQMIX_TORCH_VERSION VERSION_LESS SEQMIX_TORCH_MIN_VERSION)
  message(FATAL_ERROR "seqmix needs PyTorch >= ${SEQMIX_TORCH_MIN_VERSION}, found "
                      "'${SEQMIX_TORCH_VERSION}' in ${Torch_DIR} (run scripts/setup.sh)")
endif()

# PyPI's torch wheels for Linux are CUDA builds. Their CMake package re-creates the CUDA
# targets of libtorch_cuda from a CUDA toolkit with CMake's old FindCUDA (nvcc, libcudart.so
# at a toolkit's paths) and fails without one. seqmix needs none of it: TORCH_LIBRARIES still
# names libtorch_cuda and libc10_cuda, the CUDA runtime libraries they load come from the
# environment (nvidia/*/lib, through the wheel's RPATH), and seqmix's own CUDA sources get
# the CUDA runtime LibTorch loads (SEQMIX_TORCH_CUDART below). public/cuda.cmake
# returns early when torch::cudart exists, so an empty one always stands in for it.
if(NOT TARGET torch::cudart)
  add_library(torch::cudart INTERFACE IMPORTED)
endif()
find_package(Torch ${SEQMIX_TORCH_MIN_VERSION} REQUIRED)
get_filename_component(SEQMIX_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)

# NCCL's header and the CUDA runtime's, from the wheels that PyPI's torch depends on
# (site-packages/nvidia/nccl, nvidia/cu13), for c10d's ProcessGroupNCCL.hpp: data-parallel
# CUDA runs reduce through NCCL (src/dist/process_group.cpp; the library itself is inside
# libtorch_cuda). Empty where the environment has neither.
get_filename_component(_seqmix_site "${SEQMIX_TORCH_LIB_DIR}/../.." ABSOLUTE)
# The CUDA runtime that LibTorch loads (the wheel's nvidia/cu13), for seqmix's own CUDA
# sources to link: one runtime in the process, found wherever the toolkit keeps its own.
find_library(SEQMIX_TORCH_CUDART NAMES libcudart.so.13 libcudart.so.12 cudart
             PATHS "${_seqmix_site}/nvidia/cu13/lib" "${_seqmix_site}/nvidia/cuda_runtime/lib"
             NO_DEFAULT_PATH)
set(SEQMIX_NCCL_INCLUDE_DIRS "")
if(EXISTS "${_seqmix_site}/nvidia/nccl/include/nccl.h")
  foreach(_d nvidia/nccl/include nvidia/cu13/include)
    if(EXISTS "${_seqmix_site}/${_d}")
      list(APPEND SEQMIX_NCCL_INCLUDE_DIRS "${_seqmix_site}/${_d}")
    endif()
  endforeach()
endif()

# The wheel's libraries are built with a newer GCC against an older libstdc++ and carry the
# parts of the C++ library that the old one lacks (std::filesystem among them), exported.
# A program resolves such a symbol to the first library in its load order that defines it:
# with libtorch.so ahead of libstdc++.so, seqmix's std::filesystem::remove_all ran the
# wheel's copy and crashed. So libstdc++ is linked first, ahead of LibTorch (seqmix::torch
# below puts it there; the order of a program's DT_NEEDED entries is its load order).
if(NOT TARGET seqmix::torch_libraries)
  add_library(seqmix::torch_libraries INTERFACE IMPORTED)
  set_target_properties(seqmix::torch_libraries PROPERTIES
    INTERFACE_LINK_LIBRARIES "-Wl,--push-state,--no-as-needed;stdc++;-Wl,--pop-state;${TORCH_LIBRARIES}")
endif()

# OpenMP: ATen's at::parallel_for is an inline `#pragma omp parallel` in its headers (the
# wheel uses the OpenMP backend), so code that includes them is compiled with -fopenmp, or
# every parallel_for it calls runs on one thread. It links the wheel's own libgomp.so.1, the
# runtime LibTorch's threads live in: a second OpenMP runtime (the compiler's) in the same
# process would keep a second thread pool. Clang (scripts/fuzz.sh's builds only) emits calls
# into LLVM's runtime, which libgomp does not provide: there it links libomp as well
# (libomp-dev), and the fuzzers live with the second pool.
if(NOT TARGET seqmix::openmp)
  find_library(SEQMIX_TORCH_GOMP NAMES libgomp.so.1 PATHS "${SEQMIX_TORCH_LIB_DIR}"
               NO_DEFAULT_PATH REQUIRED)
  add_library(seqmix::openmp INTERFACE IMPORTED)
  set_target_properties(seqmix::openmp PROPERTIES
    INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CXX>:-fopenmp>"
    INTERFACE_LINK_OPTIONS "$<$<CXX_COMPILER_ID:Clang>:-fopenmp>"
    INTERFACE_LINK_LIBRARIES "${SEQMIX_TORCH_GOMP}")
endif()
