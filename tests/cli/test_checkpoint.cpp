// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): checkpoints whose zip
// archive and CRC-32s are valid but whose contents are not, each refused by eval, generate
// and train --resume with one message naming the checkpoint, leaving the run folder as it
// was; and the fuzzers' finds.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <zip.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "seqmix/models/presets.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace fs = std::filesystem;
using seqmix::testing::json_lines;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;

namespace {

struct Entry {
  std::string name;
  std::string bytes;
};

std::vector<Entry> read_zip(const std::string& path) {
  std::vector<Entry> out;
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &code);
  if (!z) return out;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st);
    Entry e{st.name, std::string(static_cast<size_t>(st.size), '\0')};
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    zip_fread(f, e.bytes.data(), e.bytes.size());
    zip_fclose(f);
    out.push_back(std::move(e));
  }
  zip_discard(z);
  return out;
}

// A valid zip (stored entries, correct CRC-32s) holding `entries`.
void write_zip(const std::string& path, const std::vector<Entry>& entries) {
  fs::remove(path);
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  ASSERT_NE(z, nullptr);
  for (const Entry& e : entries) {
    zip_source_t* src = zip_source_buffer(z, e.bytes.data(), e.bytes.size(), 0);
    const zip_int64_t i = zip_file_add(z, e.name.c_str(), src, ZIP_FL_OVERWRITE);
    ASSERT_GE(i, 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0);
  }
  ASSERT_EQ(zip_close(z), 0);
}

Entry& entry(std::vector<Entry>& entries, const std::string& name) {
  for (Entry& e : entries)
    if (e.name == name) return e;
  throw std::runtime_error("no entry " + name);
}

// The opcodes of a protocol-2 pickle: [start, end) of each.
std::vector<std::pair<size_t, size_t>> pickle_ops(const std::string& p) {
  std::vector<std::pair<size_t, size_t>> ops;
  size_t i = 0;
  while (i < p.size()) {
    const auto op = static_cast<uint8_t>(p[i]);
    size_t len = 1;
    if (op == 0x80 || op == 'q' || op == 'h' || op == 'K') len = 2;
    else if (op == 'M') len = 3;
    else if (op == 'r' || op == 'j' || op == 'J') len = 5;
    else if (op == 'G') len = 9;
    else if (op == 0x8a) len = 2 + static_cast<uint8_t>(p[i + 1]);
    else if (op == 'X') {
      uint32_t n;
      std::memcpy(&n, &p[i + 1], 4);
      len = 5 + n;
    } else if (op == 'c') {
      len = p.find('\n', p.find('\n', i) + 1) + 1 - i;
    }
    ops.emplace_back(i, i + len);
    if (op == '.') break;
    i += len;
  }
  return ops;
}

bool is_int(const std::string& p, std::pair<size_t, size_t> op) {
  const char c = p[op.first];
  return c == 'K' || c == 'M' || c == 'J';
}

int64_t int_value(const std::string& p, std::pair<size_t, size_t> op) {
  uint32_t v = 0;
  for (size_t k = op.second; k-- > op.first + 1;) v = (v << 8) | static_cast<uint8_t>(p[k]);
  return p[op.first] == 'J' ? static_cast<int32_t>(v) : static_cast<int64_t>(v);
}

std::string encode_int(int64_t v) {
  std::string s(1, v >= 0 && v < 256 ? 'K' : v >= 0 && v < 65536 ? 'M' : 'J');
  const int n = s[0] == 'K' ? 1 : s[0] == 'M' ? 2 : 4;
  for (int k = 0; k < n; ++k) s.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
  return s;
}

// Where the layout of the tensor stored in record `key` is written in data.pkl: the numel
// of its storage, its storage offset, its sizes and its strides (the integer opcodes).
struct Layout {
  std::pair<size_t, size_t> numel, offset;
  std::vector<std::pair<size_t, size_t>> sizes, strides;
};

Layout find_layout(const std::string& pkl, const std::string& key) {
  const auto ops = pickle_ops(pkl);
  for (size_t k = 0; k < ops.size(); ++k) {
    const auto [b, e] = ops[k];
    if (pkl[b] != 'X' || pkl.substr(b + 5, e - b - 5) != key) continue;
    // X key, [q], X 'cpu' or h, numel, t, Q, [q], offset, (, sizes, t, (, strides, t
    Layout l;
    size_t j = k + 1;
    while (!is_int(pkl, ops[j])) ++j;
    l.numel = ops[j];
    while (pkl[ops[j].first] != 'Q') ++j;
    while (!is_int(pkl, ops[j])) ++j;
    l.offset = ops[j++];
    EXPECT_EQ(pkl[ops[j].first], '(');
    for (++j; pkl[ops[j].first] != 't'; ++j) l.sizes.push_back(ops[j]);
    ++j;
    EXPECT_EQ(pkl[ops[j].first], '(');
    for (++j; pkl[ops[j].first] != 't'; ++j) l.strides.push_back(ops[j]);
    return l;
  }
  throw std::runtime_error("no storage " + key + " in data.pkl");
}

// Sets the integers at `at` (replaced back to front so the earlier positions hold).
std::string set_ints(std::string pkl, std::vector<std::pair<std::pair<size_t, size_t>, int64_t>> at) {
  std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [op, v] : at) pkl.replace(op.first, op.second - op.first, encode_int(v));
  return pkl;
}

// Every file of a folder and its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& f : fs::recursive_directory_iterator(dir))
    if (f.is_regular_file()) files[f.path().string()] = read_text(f.path().string());
  return files;
}

// The files added, removed or changed between two snapshots, one per line.
std::string changed_files(const std::map<std::string, std::string>& a,
                          const std::map<std::string, std::string>& b) {
  std::string out;
  for (const auto& [name, bytes] : a) {
    const auto it = b.find(name);
    if (it == b.end()) out += "removed " + name + "\n";
    else if (it->second != bytes) out += "changed " + name + "\n";
  }
  for (const auto& [name, bytes] : b)
    if (!a.count(name)) out += "added " + name + "\n";
  return out;
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  static std::string dir_, corpus_, good_;

  static void SetUpTestSuite() {
    dir_ = seqmix::testing::temp_dir("checkpoint");
    corpus_ = seqmix::testing::tiny_corpus(dir_);
    const auto r = run_cli("train --size tiny --max-len 32 --batch-size 4 --max-steps 3 "
                           "--threads 1 --data " + corpus_ + " --out " + dir_ + "/good");
    ASSERT_EQ(r.code, 0) << r.output;
    good_ = dir_ + "/good/checkpoint.pt";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A run folder (a copy of the good one) whose checkpoint holds `entries`.
  std::string make_run(const std::string& name, const std::vector<Entry>& entries) {
    const std::string run = dir_ + "/" + name;
    fs::remove_all(run);
    fs::copy(dir_ + "/good", run, fs::copy_options::recursive);
    write_zip(run + "/checkpoint.pt", entries);
    // The checkpoint is the case; a config.toml copied from the good run would be refused
    // first wherever the crafted checkpoint's configuration differs from it.
    fs::remove(run + "/config.toml");
    return run;
  }

  // eval, generate and train --resume each fail with one message naming the checkpoint
  // (containing `expect`) and leave every file of the run folder as it was.
  void expect_refused(const std::string& run, const std::string& expect) {
    const std::string ckpt = run + "/checkpoint.pt";
    const auto before = snapshot(run);
    for (const std::string& cmd :
         {"eval " + run + " --threads 1", "generate " + run + " --max-new-tokens 8 --threads 1",
          "train --resume --size tiny --max-len 32 --batch-size 4 --max-steps 6 --threads 1 "
          "--data " + corpus_ + " --out " + run}) {
      const auto r = run_cli(cmd);
      SCOPED_TRACE(cmd);
      EXPECT_EQ(r.code, 1) << r.output;
      EXPECT_NE(r.output.find("checkpoint '" + ckpt + "'"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
      EXPECT_TRUE(json_lines(r.output).empty()) << r.output;
      EXPECT_EQ(changed_files(before, snapshot(run)), "") << "the run folder changed";
    }
  }
};
std::string CorruptCheckpoint::dir_, CorruptCheckpoint::corpus_, CorruptCheckpoint::good_;

TEST_F(CorruptCheckpoint, EmptiedTensorRecord) {
  auto entries = read_zip(good_);
  entry(entries, "archive/data/0").bytes.clear();
  expect_refused(make_run("emptied", entries),
                 "is corrupt: tensor 'model/pos_emb' needs 8192 bytes but its storage "
                 "'archive/data/0' holds 0");
}

TEST_F(CorruptCheckpoint, ShortenedTensorRecord) {
  auto entries = read_zip(good_);
  entry(entries, "archive/data/1").bytes.resize(100);
  expect_refused(make_run("shortened", entries),
                 "is corrupt: tensor 'model/tok_emb.weight' needs 65536 bytes but its storage "
                 "'archive/data/1' holds 100");
}

TEST_F(CorruptCheckpoint, StorageSizeThatDoesNotMatchItsRecord) {
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const Layout l = find_layout(pkl, "0");
  ASSERT_EQ(int_value(pkl, l.numel), 2048);
  pkl = set_ints(pkl, {{l.numel, 4096}});
  expect_refused(make_run("numel", entries),
                 "tensor 'model/pos_emb' needs 16384 bytes but its storage 'archive/data/0' "
                 "holds 8192");
}

TEST_F(CorruptCheckpoint, SizeLargerThanItsStorage) {
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const Layout l = find_layout(pkl, "0");
  ASSERT_EQ(l.sizes.size(), 2u);
  ASSERT_EQ(int_value(pkl, l.sizes[0]), 32);
  pkl = set_ints(pkl, {{l.sizes[0], 33}});
  expect_refused(make_run("size", entries),
                 "tensor 'model/pos_emb' needs 8448 bytes (sizes [33, 64], strides [64, 1], "
                 "storage offset 0) but its storage holds 8192");
}

TEST_F(CorruptCheckpoint, StridePastItsStorage) {
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const Layout l = find_layout(pkl, "0");
  ASSERT_EQ(int_value(pkl, l.strides[0]), 64);
  pkl = set_ints(pkl, {{l.strides[0], 65}});
  expect_refused(make_run("stride", entries),
                 "tensor 'model/pos_emb' needs 8316 bytes (sizes [32, 64], strides [65, 1], "
                 "storage offset 0) but its storage holds 8192");
}

TEST_F(CorruptCheckpoint, OffsetPastItsStorage) {
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const Layout l = find_layout(pkl, "0");
  ASSERT_EQ(int_value(pkl, l.offset), 0);
  pkl = set_ints(pkl, {{l.offset, 1}});
  expect_refused(make_run("offset", entries),
                 "tensor 'model/pos_emb' needs 8196 bytes (sizes [32, 64], strides [64, 1], "
                 "storage offset 1) but its storage holds 8192");
}

TEST_F(CorruptCheckpoint, NegativeSizeAndHugeStride) {
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const Layout l = find_layout(pkl, "0");
  pkl = set_ints(pkl, {{l.sizes[1], -64}});
  expect_refused(make_run("negative", entries),
                 "tensor 'model/pos_emb' has impossible sizes, strides or offset (sizes [32, -64]");
  entries = read_zip(good_);
  std::string& pkl2 = entry(entries, "archive/data.pkl").bytes;
  pkl2 = set_ints(pkl2, {{find_layout(pkl2, "0").strides[0], 0x7fffffff}});
  expect_refused(make_run("huge_stride", entries), "tensor 'model/pos_emb' needs ");
}

TEST_F(CorruptCheckpoint, MalformedPickle) {
  // An opcode removed from data.pkl: LibTorch's unpickler would pop an empty stack or index
  // past it; the archive is refused before it runs.
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const auto ops = pickle_ops(pkl);
  const auto mark = std::find_if(ops.begin() + 10, ops.end(),
                                 [&](const auto& o) { return pkl[o.first] == '('; });
  ASSERT_NE(mark, ops.end());
  pkl.erase(mark->first, 1);
  expect_refused(make_run("pickle", entries), "is corrupt: pickle 'archive/data.pkl' ");
}

TEST_F(CorruptCheckpoint, NonFiniteWeights) {
  auto entries = read_zip(good_);
  std::string& w = entry(entries, "archive/data/0").bytes;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&w[40], &nan, 4);
  expect_refused(make_run("nan", entries), "holds non-finite values in parameter 'pos_emb'");
  entries = read_zip(good_);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(&entry(entries, "archive/data/1").bytes[0], &inf, 4);
  expect_refused(make_run("inf", entries),
                 "holds non-finite values in parameter 'tok_emb.weight'");
}

TEST_F(CorruptCheckpoint, CodeThatIsNotADeclaration) {
  // The archive's TorchScript is compiled by LibTorch; only plain declarations are accepted.
  auto entries = read_zip(good_);
  std::string& code = entry(entries, "archive/code/__torch__.py").bytes;
  code += "  def __setstate__(self, state):\n    return None\n";
  expect_refused(make_run("code", entries), "is corrupt: code 'archive/code/__torch__.py' line ");
}

TEST_F(CorruptCheckpoint, TheGoodCheckpointLoads) {
  // The unchanged archive, re-written by libzip as the tests below write theirs, is accepted.
  const auto run = make_run("rezipped", read_zip(good_));
  const auto r = run_cli("eval " + run + " --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_FALSE(json_lines(r.output).empty());
  EXPECT_FALSE(json_lines(r.output).back()["loss"].is_null()) << r.output;
}

TEST_F(CorruptCheckpoint, ArchiveFormatVersion) {
  // LibTorch writes version 3 and reads 1..10; outside that it throws an "[enforce fail at
  // inline_container.cc:165] ... please upgrade PyTorch" that is not shown.
  auto entries = read_zip(good_);
  ASSERT_EQ(entry(entries, "archive/version").bytes, "3\n");
  entry(entries, "archive/version").bytes = "99\n";
  expect_refused(make_run("version99", entries),
                 "' has archive format version 99; this seqmix reads versions 1..10");
  // std::stoull, which LibTorch parses it with, would take "-1" as 2^64 - 1 and " 3x" as 3.
  for (const auto& [text, expect] : std::vector<std::pair<std::string, std::string>>{
           {"0", "' has archive format version 0; this seqmix reads versions 1..10"},
           {"-1\n", "' is corrupt: its version record 'archive/version' is not a decimal number"},
           {" 3x\n", "' is corrupt: its version record 'archive/version' is not a decimal number"},
           {"\n", "' is corrupt: its version record 'archive/version' is not a decimal number"}}) {
    entry(entries, "archive/version").bytes = text;
    const std::string run = make_run("version_text", entries);
    const auto r = run_cli("eval " + run + " --threads 1");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("checkpoint '" + run + "/checkpoint.pt" + expect), std::string::npos)
        << r.output;
  }
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const Entry& e) { return e.name == "archive/version"; }),
                entries.end());
  expect_refused(make_run("no_version", entries),
                 "is corrupt: entry 'archive/version' is missing");
}

// The configuration text stored in data.pkl (a BINUNICODE string) with `from` replaced by `to`.
std::string edit_config(std::string pkl, const std::string& from, const std::string& to) {
  for (const auto& [b, e] : pickle_ops(pkl)) {
    if (pkl[b] != 'X') continue;
    std::string text = pkl.substr(b + 5, e - b - 5);
    if (text.find("[model]") == std::string::npos) continue;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at == std::string::npos) return pkl;
    text.replace(at, from.size(), to);
    std::string op = "X";
    for (int k = 0; k < 4; ++k) op.push_back(static_cast<char>((text.size() >> (8 * k)) & 0xff));
    return pkl.replace(b, e - b, op + text);
  }
  ADD_FAILURE() << "no configuration in data.pkl";
  return pkl;
}

TEST_F(CorruptCheckpoint, WeightsOfAnotherNumberOfLayers) {
  // Module::load reads the tensors the model has and ignores the rest: a configuration edited
  // to one layer ran a 1-layer model from a 2-layer archive, silently.
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const std::string good_pkl = pkl;
  pkl = edit_config(edit_config(good_pkl, "n_layers = 2\n", "n_layers = 1\n"),
                    "mixers = [ 'aib', 'attention' ]", "mixers = [ 'aib' ]");
  const std::string run = make_run("fewer_layers", entries);
  expect_refused(run, "' holds tensor 'blocks.1.");
  const auto r = run_cli("eval " + run + " --threads 1");
  EXPECT_NE(r.output.find("' that a model with this configuration does not have\n"),
            std::string::npos)
      << r.output;
  // And the other way: a model with a third layer whose weights the archive lacks.
  pkl = edit_config(good_pkl, "n_layers = 2\n", "n_layers = 3\n");
  expect_refused(make_run("more_layers", entries), "' lacks parameter 'blocks.2.");
}

TEST_F(CorruptCheckpoint, LibTorchTextIsNotShown) {
  // The RNG state, read only on resume, cut to 100 bytes (inside its storage): LibTorch's
  // "Expected either a CPUGeneratorImplStateLegacy of size ..." becomes our wording.
  auto entries = read_zip(good_);
  std::string& pkl = entry(entries, "archive/data.pkl").bytes;
  const std::string byte_storage = "ctorch\nByteStorage\n";
  const auto global = pkl.rfind(byte_storage);
  ASSERT_NE(global, std::string::npos);
  std::string key;
  for (const auto& [b, e] : pickle_ops(pkl))
    if (b > global && pkl[b] == 'X') {
      key = pkl.substr(b + 5, e - b - 5);
      break;
    }
  const Layout l = find_layout(pkl, key);
  ASSERT_EQ(l.sizes.size(), 1u);
  ASSERT_GT(int_value(pkl, l.sizes[0]), 100);
  pkl = set_ints(pkl, {{l.sizes[0], 100}});
  const std::string run = make_run("rng", entries);
  const auto r = run_cli("train --resume --size tiny --max-len 32 --batch-size 4 --max-steps 6 "
                         "--threads 1 --data " + corpus_ + " --out " + run);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint '" + run + "/checkpoint.pt' is corrupt (LibTorch cannot "
                          "load its RNG state)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Expected"), std::string::npos) << r.output;
  // eval and generate do not read it.
  EXPECT_EQ(run_cli("eval " + run + " --threads 1").code, 0);
}

// Loading is exact (every stored tensor belongs to the model and every parameter and buffer is
// stored): each kind of model, saved with its optimizer state, loads back into one built from
// its own configuration, and not into one with a layer more or less.
TEST(FuzzedCheckpoint, IsRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"checkpoint_record_emptied.pt",
       "tensor 'optimizer/state.0x55e2b3b88690.exp_avg' needs 1024 bytes but its storage "
       "'archive/data/23' holds 0"},
      {"checkpoint_record_overread.pt",
       "tensor 'model/pos_emb' needs 1024 bytes but its storage 'archive/data/0' holds 1021"},
      {"checkpoint_optimizer_overread.pt",
       "tensor 'optimizer/state.0x55e2b3b889c0.exp_avg_sq' needs 64 bytes but its storage "
       "'archive/data/26' holds 63"}};
  for (const auto& [name, expect] : cases) {
    const std::string path = SEQMIX_SOURCE_DIR "/tests/data/fuzz/" + name;
    for (const std::string cmd : {"eval ", "generate "}) {
      const auto r = run_cli(cmd + path + " --threads 1");
      SCOPED_TRACE(cmd + name);
      EXPECT_EQ(r.code, 1) << r.output;
      EXPECT_NE(r.output.find("checkpoint '" + path + "' is corrupt: " + expect), std::string::npos)
          << r.output;
    }
  }
}
}  // namespace
