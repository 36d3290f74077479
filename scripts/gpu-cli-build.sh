#!/usr/bin/env bash
# Builds the command-line tool, `seqmix`, on a machine without apt or network (the GPU
# machine of ../shared/GPU.md), from the Debian packages scripts/gpu-deps.sh extracted into
# gpu-deps/: CMake's packages and pkg-config's files are read from there, nothing is
# installed. Where gpu-deps/ is absent it builds against the machine's own packages.
#
#   bash scripts/gpu-cli-build.sh BUILD_DIR [JOBS]
#
# Environment: SEQMIX_PYTHON (default python3: the interpreter whose torch is LibTorch),
# SEQMIX_CUDA (default on). Builds BUILD_DIR/seqmix only (no tests, benchmarks or Python
# package), and BUILD_DIR/runtime-libs/: links to the carried copies of the shared libraries
# the executable needs and the machine lacks (OpenSSL 3 and bzip2 for libzip, typically none),
# for LD_LIBRARY_PATH; the machine's own copies are used wherever it has them.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: gpu-cli-build.sh BUILD_DIR [JOBS]}
jobs=${2:-$(nproc)}
py=${SEQMIX_PYTHON:-python3}
deps=$here/gpu-deps
mkdir -p "$build"
build=$(cd "$build" && pwd)
args=()
if [ -d "$deps/usr" ]; then
  lib=$deps/usr/lib/x86_64-linux-gnu
  # Debian's .pc files name /usr as their prefix; here the prefix is gpu-deps/usr.
  find "$deps" -name '*.pc' -exec sed -i "s#^prefix=/usr\$#prefix=$deps/usr#" {} +
  # Only the carried .pc files: a library the machine also has must not be mixed in.
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$deps/usr/share/pkgconfig
  unset PKG_CONFIG_PATH
  # pkg-config: the machine's, else the carried pkgconf with its library beside it (named
  # explicitly either way: CMake would otherwise find gpu-deps/usr/bin/pkg-config by the
  # prefix path, without that library).
  pkgconfig=$(command -v pkg-config || true)
  if [ -z "$pkgconfig" ]; then
    pkgconfig=$build/pkg-config
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$lib" "$deps/usr/bin/pkgconf" > "$pkgconfig"
    chmod +x "$pkgconfig"
  fi
  args+=("-DPKG_CONFIG_EXECUTABLE=$pkgconfig")
  # zlib1g-dev's libz.so is an absolute link to Debian's /lib/x86_64-linux-gnu/libz.so.1.2.13;
  # link the machine's own zlib (every Python has one) with the carried header.
  zlib=$({ ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null || true; } |
           awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  [ -n "$zlib" ] && args+=("-DZLIB_LIBRARY=$zlib" "-DZLIB_INCLUDE_DIR=$deps/usr/include")
  args+=("-DCMAKE_PREFIX_PATH=$deps/usr")
fi
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSEQMIX_CUDA="${SEQMIX_CUDA:-on}" -DSEQMIX_CCACHE=OFF -DSEQMIX_BUILD_TESTS=OFF \
  -DSEQMIX_BUILD_BENCH=OFF -DSEQMIX_BUILD_PYTHON=OFF -DSEQMIX_PYTHON="$(command -v "$py")" \
  "${args[@]}"
cmake --build "$build" --target seqmix --parallel "$jobs"
rm -rf "$build/runtime-libs"
mkdir -p "$build/runtime-libs"
if [ -d "$deps" ]; then
  for so in $(ldd "$build/seqmix" | awk '/not found/ {print $1}' | sort -u); do
    found=$(find "$deps" -name "$so" | head -n 1)
    [ -n "$found" ] && ln -sf "$found" "$build/runtime-libs/$so"
  done
fi
missing=$(LD_LIBRARY_PATH="$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            ldd "$build/seqmix" | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "gpu-cli-build: $build/seqmix cannot load: $missing" >&2
  exit 1
fi
echo "gpu-cli-build: $build/seqmix built; carried run-time libraries used:" \
  "$(ls "$build/runtime-libs" | tr '\n' ' ')"
