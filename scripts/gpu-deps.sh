#!/usr/bin/env bash
# The Debian 12 packages the whole CLI build needs beyond what a GPU machine has (Python with
# PyTorch, nvcc, CMake, ninja, a compiler; ../shared/GPU.md): downloaded here with
# `apt-get download` and extracted with `dpkg-deb -x` into gpu-deps/ (git-ignored), which the
# device tool carries to the GPU machine (`carry: ["gpu-deps", ...]`), where
# scripts/gpu-check.sh points CMake, pkg-config and the loader at it. Nothing is installed.
#
#   bash scripts/gpu-deps.sh            # (re)makes gpu-deps/, prints its size
#
# Header-only libraries and their CMake packages (CLI11, toml++, nlohmann/json, fmt), the
# libraries the CLI links (SentencePiece, libzip, zlib's headers), Gloo's headers (c10d's
# ProcessGroupGloo.hpp includes them; the torch wheel has none), pkg-config (pkgconf, for
# CMake's pkg_check_modules), and the shared libraries libzip needs at run time (OpenSSL 3,
# bzip2), which gpu-check.sh uses only where the GPU machine lacks them.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$here/gpu-deps
pkgs=(
  libcli11-dev libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev libfmt-dev libfmt9
  libsentencepiece-dev libsentencepiece0 zlib1g-dev libzip-dev libzip4 libgloo-dev
  pkgconf pkgconf-bin libpkgconf3 libbz2-1.0 libssl3
)
command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null || {
  echo "gpu-deps: needs apt-get and dpkg-deb (a Debian machine)" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq "${pkgs[@]}") || {
  echo "gpu-deps: apt-get download failed; run scripts/setup.sh (it runs apt-get update)" >&2
  exit 1
}
# Built aside and moved into place whole, so that an interrupted run leaves no half folder.
stage=$tmp/gpu-deps
mkdir -p "$stage"
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$stage"; done
rm -rf "$stage/usr/share/doc" "$stage/usr/share/man" "$stage/usr/share/lintian"
ls "$tmp"/*.deb | xargs -n 1 basename > "$stage/PACKAGES"
rm -rf "$dest"
mv "$stage" "$dest"
echo "gpu-deps: ${#pkgs[@]} packages in $dest ($(du -sh "$dest" | cut -f 1))"
