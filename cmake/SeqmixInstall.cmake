# Installation of seqmix as a C++ library (included once, at the end of the top-level
# CMakeLists.txt):
#
#   <prefix>/include/seqmix/...                        public headers
#   <prefix>/<libdir>/libseqmix.a                      the library (static)
#   <prefix>/<libdir>/seqmix/libseqmix_sentencepiece.so the SentencePiece plugin
#   <prefix>/<libdir>/cmake/seqmix/                    find_package(seqmix) -> seqmix::seqmix
#   <prefix>/<libdir>/pkgconfig/seqmix.pc              pkg-config --cflags --libs seqmix
#   <prefix>/bin/seqmix                                the command-line tool
#
# Every installed file finds the others relative to itself (the CMake package through
# ${_IMPORT_PREFIX}, seqmix.pc through ${pcfiledir}, the CLI through $ORIGIN), so
# `cmake --install build --prefix P` may choose any P, also one other than the configured
# CMAKE_INSTALL_PREFIX, and the tree may be moved afterwards. examples/ is built against such
# an installation in CI (scripts/examples.sh).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SEQMIX_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/seqmix" CACHE STRING
    "Where seqmixConfig.cmake goes, relative to the install prefix")
# The plugin is loaded with dlopen, never linked, so it stays out of the linker's and
# ldconfig's way in a folder of its own.
set(SEQMIX_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/seqmix")
foreach(dir SEQMIX_INSTALL_CMAKEDIR SEQMIX_INSTALL_PLUGINDIR CMAKE_INSTALL_INCLUDEDIR
            CMAKE_INSTALL_BINDIR)
  if(IS_ABSOLUTE "${${dir}}")
    # Relative paths are what keeps the installation relocatable (see above).
    message(FATAL_ERROR "${dir} must be relative to the install prefix, got '${${dir}}'")
  endif()
endforeach()

# Consumers compile our headers, which need C++17 (std::optional, inline variables, ...).
target_compile_features(seqmix PUBLIC cxx_std_17)
# The build tree's include folder is a BUILD_INTERFACE in CMakeLists.txt; this is its
# installed counterpart (relative: the exported file prefixes it with the installation).
target_include_directories(seqmix PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# --- the SentencePiece plugin ------------------------------------------------------------
# libseqmix is static, so it lives inside the consumer's program and cannot locate itself at
# run time; and the prefix is only known for sure at install time (--prefix). The installed
# package therefore puts the plugin's folder on the RUNPATH of every program linked against
# it, and src/data/tokenizer.cpp asks the dynamic loader for the bare file name after its
# explicit candidates: the program finds the plugin of the installation it was built with.
# $<INSTALL_PREFIX> becomes ${_IMPORT_PREFIX} in the exported targets file, so the path
# follows the installation wherever it is. The build tree is unaffected (BUILD_INTERFACE has
# no such option; the compiled-in build path serves the tests).
target_link_options(seqmix INTERFACE
  "$<INSTALL_INTERFACE:LINKER:-rpath,$<INSTALL_PREFIX>/${SEQMIX_INSTALL_PLUGINDIR}>")

install(TARGETS seqmix EXPORT seqmixTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS seqmix_sentencepiece LIBRARY DESTINATION ${SEQMIX_INSTALL_PLUGINDIR})
install(DIRECTORY include/seqmix DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

# The CLI, if this build has it under its usual target name: its RUNPATH names the plugin's
# folder relative to the installed binary.
if(TARGET seqmix_cli)
  file(RELATIVE_PATH _seqmix_bin_to_plugins "/${CMAKE_INSTALL_BINDIR}"
       "/${SEQMIX_INSTALL_PLUGINDIR}")
  # ... and LibTorch's folder in the Python environment (the wheel's libraries are not on the
  # loader's default path).
  set_target_properties(seqmix_cli PROPERTIES
    INSTALL_RPATH "$ORIGIN/${_seqmix_bin_to_plugins};${SEQMIX_TORCH_LIB_DIR}")
  install(TARGETS seqmix_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# The Python extension: its RUNPATH names the plugin's folder too (dlopen of a bare file name
# searches the RUNPATH of the object that calls it, here seqmix/_C.so).
if(TARGET seqmix_python)
  file(RELATIVE_PATH _seqmix_py_to_plugins "/${SEQMIX_INSTALL_PYTHONDIR}"
       "/${SEQMIX_INSTALL_PLUGINDIR}")
  set_target_properties(seqmix_python PROPERTIES
    INSTALL_RPATH "$ORIGIN/${_seqmix_py_to_plugins};${SEQMIX_TORCH_LIB_DIR}")
endif()

# --- the CMake package -------------------------------------------------------------------
install(EXPORT seqmixTargets NAMESPACE seqmix:: FILE seqmixTargets.cmake
  DESTINATION ${SEQMIX_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/seqmixConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/seqmixConfig.cmake
  INSTALL_DESTINATION ${SEQMIX_INSTALL_CMAKEDIR})
# 0.y releases may change the API from one minor version to the next (semantic versioning's
# rule for 0.y), so a request for 0.1 accepts 0.1.z only; from 1.0 on, same major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_seqmix_compat SameMinorVersion)
else()
  set(_seqmix_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/seqmixConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_seqmix_compat})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/seqmixConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/seqmixConfigVersion.cmake
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/SeqmixTorch.cmake
  DESTINATION ${SEQMIX_INSTALL_CMAKEDIR})

# --- pkg-config ----------------------------------------------------------------------------
# pkg-config has no LibTorch module, so its flags are written out here from what
# find_package(Torch) reported: include folders, the C++ ABI flag, torch_cpu's definitions,
# and the libraries. torch_cpu registers its operators from static constructors and is linked
# with --no-as-needed, as LibTorch's own CMake package does. The other dependencies have
# .pc files of their own (Requires). libseqmix is static, so every dependency is needed at
# link time, not only the ones its headers use: all go in Requires and Libs, none in
# the .private fields.
set(_seqmix_pc_cflags "")
foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
  string(APPEND _seqmix_pc_cflags " -I${dir}")
endforeach()
string(APPEND _seqmix_pc_cflags " ${TORCH_CXX_FLAGS}")
if(TARGET torch_cpu)
  get_target_property(_seqmix_torch_defs torch_cpu INTERFACE_COMPILE_DEFINITIONS)
  if(_seqmix_torch_defs)
    foreach(def IN LISTS _seqmix_torch_defs)
      string(APPEND _seqmix_pc_cflags " -D${def}")
    endforeach()
  endif()
endif()
string(APPEND _seqmix_pc_cflags " -fopenmp")
# The wheel's libraries (and its libgomp.so.1, the OpenMP runtime LibTorch uses) are not in
# the loader's default path: the program gets an RPATH to them.
set(_seqmix_pc_libs "-L${SEQMIX_TORCH_LIB_DIR} -Wl,-rpath,${SEQMIX_TORCH_LIB_DIR}")
# libstdc++ ahead of LibTorch: SeqmixTorch.cmake says why.
string(APPEND _seqmix_pc_libs " -Wl,--no-as-needed -lstdc++ -ltorch -ltorch_cpu")
string(APPEND _seqmix_pc_libs " -Wl,--as-needed -lc10 ${SEQMIX_TORCH_GOMP}")
foreach(lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND _seqmix_pc_libs " -l${lib}")
endforeach()
string(STRIP "${_seqmix_pc_cflags}" SEQMIX_PC_CFLAGS)
set(SEQMIX_PC_LIBS "${_seqmix_pc_libs}")
# seqmix.pc lives in <prefix>/<libdir>/pkgconfig: the prefix is found from there.
file(RELATIVE_PATH SEQMIX_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" SEQMIX_PC_TO_PREFIX "${SEQMIX_PC_TO_PREFIX}")
configure_file(cmake/seqmix.pc.in ${CMAKE_CURRENT_BINARY_DIR}/seqmix.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/seqmix.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
