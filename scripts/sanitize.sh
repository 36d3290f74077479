#!/usr/bin/env bash
# Builds seqmix and its unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (GCC; our own code is instrumented, LibTorch and the other libraries are not) in
# build-asan/ and runs the tests there. Any report aborts the test that triggered it.
# -O1 keeps the tests fast enough; assertions stay on (no NDEBUG).
# Not run here: Dist.UnderTorchrunsAgentStore..., whose test process serves a c10d TCPStore
# itself (LibTorch's own daemon thread and allocations, not seqmix code, under LeakSanitizer);
# the workers it starts are the same as in the other Dist tests, which do run here.
# Not run here: the op registry's long cases (below).
# Not run here: the SentencePiece tests (Signals.TermWhileLoading... encodes with one).
# SentencePiece must be loaded with RTLD_DEEPBIND next
# to LibTorch (src/data/sentencepiece_plugin.cpp says why), which AddressSanitizer refuses;
# scripts/fuzz.sh runs SentencePiece's loader and encoder under AddressSanitizer instead.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build-asan/CMakeCache.txt ]; then
  CXX=g++ cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_FLAGS="-O1 -g1" -DSEQMIX_SANITIZE=address,undefined -DSEQMIX_BUILD_BENCH=OFF
fi
# The Python extension is not built here: an instrumented module cannot load into an
# interpreter whose runtime is not AddressSanitizer's.
cmake -S . -B build-asan -DSEQMIX_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan --parallel "$(nproc)"
cd build-asan
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# halt_on_error: the first report fails the test; detect_leaks: LeakSanitizer at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The op registry's cases at L >= 1000 run in the plain build only: under the sanitizers each
# takes 15-25 s (40 cases, about 7 minutes of the CI's time); the same kernels' block and
# tail paths run here at L = 17, 64, 130 and 300.
ctest --output-on-failure --parallel "$(nproc)" --timeout 1500 \
  -E '^(Tokenizer\.|TokenizerTrain\.|BpeRun\.|Cli\.BpeTokenizer|HostileInputs\.NonModelTokenizer|Resolve\.Tokenizer|Signals\.TermWhileLoading|Dist\.UnderTorchrunsAgentStore)|^Registry/.*_L(1000|1024|4096|16384)_'
