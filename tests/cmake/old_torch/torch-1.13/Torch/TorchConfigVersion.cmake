# The version file LibTorch 1.13.1's CMake package carries (Debian's libtorch-dev), reduced
# to what cmake/SeqmixTorch.cmake reads.
set(PACKAGE_VERSION "1.13.1")
