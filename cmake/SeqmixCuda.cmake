# CUDA kernels: SEQMIX_CUDA = auto | on | off (default auto).
#   auto  builds them when CMake finds a CUDA compiler (nvcc on PATH, CUDACXX or
#         CMAKE_CUDA_COMPILER) and the PyTorch it builds against is a CUDA build;
#   on    the same, and a missing compiler or a CPU-only PyTorch is an error;
#   off   CPU only.
# SEQMIX_CUDA_COMPILE_CHECK=ON adds the target seqmix_cuda_compile_check, which compiles the
# CUDA sources (kernels and their dispatcher registrations) into objects that nothing links:
# the CPU machines' CI compiles them with nvcc from PyPI, which has no CUDA libraries to link
# (scripts/test.sh).
#
# Included after SeqmixTorch.cmake (SEQMIX_PYTHON, SEQMIX_TORCH_CUDART). Out: SEQMIX_WITH_CUDA
# (ON when libseqmix gets the CUDA kernels), the CUDA language enabled when it is needed,
# seqmix_add_cuda_sources().

set(SEQMIX_CUDA auto CACHE STRING "Build the CUDA kernels: auto, on or off")
set_property(CACHE SEQMIX_CUDA PROPERTY STRINGS auto on off)
option(SEQMIX_CUDA_COMPILE_CHECK "Add a target that only compiles the CUDA sources" OFF)
if(NOT SEQMIX_CUDA MATCHES "^(auto|on|off)$")
  message(FATAL_ERROR "SEQMIX_CUDA must be auto, on or off, got '${SEQMIX_CUDA}'")
endif()

set(SEQMIX_WITH_CUDA OFF)
if(NOT SEQMIX_CUDA STREQUAL "off" OR SEQMIX_CUDA_COMPILE_CHECK)
  include(CheckLanguage)
  check_language(CUDA)
  # Whether the PyTorch of SEQMIX_PYTHON (cmake/SeqmixTorch.cmake) is a CUDA build.
  execute_process(COMMAND "${SEQMIX_PYTHON}" -c "import torch; print(torch.version.cuda or '')"
                  OUTPUT_VARIABLE SEQMIX_TORCH_CUDA OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(NOT SEQMIX_CUDA STREQUAL "off")
    if(CMAKE_CUDA_COMPILER AND SEQMIX_TORCH_CUDA)
      set(SEQMIX_WITH_CUDA ON)
    endif()
    if(SEQMIX_CUDA STREQUAL "on" AND NOT SEQMIX_TORCH_CUDA)
      message(FATAL_ERROR "SEQMIX_CUDA=on, but the PyTorch of '${SEQMIX_PYTHON}' is not a CUDA "
                          "build (torch.version.cuda is None)")
    endif()
    if(SEQMIX_CUDA STREQUAL "on" AND NOT CMAKE_CUDA_COMPILER)
      message(FATAL_ERROR "SEQMIX_CUDA=on, but no CUDA compiler was found (put nvcc on PATH, "
                          "or set CUDACXX or CMAKE_CUDA_COMPILER)")
    endif()
  endif()
  if(SEQMIX_CUDA_COMPILE_CHECK AND NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "SEQMIX_CUDA_COMPILE_CHECK=ON, but no CUDA compiler was found (set "
                        "CMAKE_CUDA_COMPILER)")
  endif()
  if(SEQMIX_WITH_CUDA OR SEQMIX_CUDA_COMPILE_CHECK)
    # Hopper (compute capability 9.0): sm_90 machine code plus its PTX for later chips.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    # One CUDA runtime in the process: LibTorch's shared libcudart, never a static copy.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
  endif()
endif()
message(STATUS "seqmix: CUDA kernels ${SEQMIX_WITH_CUDA} (SEQMIX_CUDA=${SEQMIX_CUDA}, "
               "compiler '${CMAKE_CUDA_COMPILER}', torch CUDA '${SEQMIX_TORCH_CUDA}')")

# Flags for seqmix's CUDA sources: LibTorch's headers under nvcc, as PyTorch's own extensions
# build them (its half/bfloat16 types, not CUDA's operators on them).
set(SEQMIX_CUDA_FLAGS --expt-relaxed-constexpr -lineinfo -D__CUDA_NO_HALF_OPERATORS__
    -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
    -D__CUDA_NO_HALF2_OPERATORS__)

# seqmix_add_cuda_sources(target): the mixers' CUDA sources (seqmix_mixer_cuda_sources in
# their mixer.cmake) into `target`, when SEQMIX_WITH_CUDA.
function(seqmix_add_cuda_sources target)
  if(NOT SEQMIX_WITH_CUDA)
    return()
  endif()
  get_property(sources GLOBAL PROPERTY SEQMIX_CUDA_SOURCES)
  target_sources(${target} PRIVATE ${sources})
  set_source_files_properties(${sources} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${SEQMIX_CUDA_FLAGS}>")
  target_compile_definitions(${target} PRIVATE SEQMIX_WITH_CUDA=1)
  # The runtime LibTorch itself loads, where its wheel has one (cmake/SeqmixTorch.cmake);
  # else the toolkit's shared libcudart (CMAKE_CUDA_RUNTIME_LIBRARY above).
  if(SEQMIX_TORCH_CUDART)
    set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY None)
    target_link_libraries(${target} PRIVATE "${SEQMIX_TORCH_CUDART}")
  endif()
endfunction()
