// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): `seqmix export --format hf`
// and `seqmix import` of its folder (include/seqmix/train/serialization/export.h): the same
// weights and the same `seqmix eval` both ways, a SentencePiece run's tokenizer and a
// classifier's integer buffers kept, the folder written whole and replaced only with
// --overwrite, and every damaged file an error naming it and the tensor.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"
#include "seqmix/train/configuration/resolve.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/train/serialization/safetensors.h"
#include "support/cli.h"
#include "support/temp_dir.h"

using namespace seqmix;
namespace fs = std::filesystem;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;
using seqmix::testing::temp_dir;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A two-step tiny Weird-Net run on the tiny corpus in `dir`.
std::string tiny_run(const std::string& dir, const std::string& extra = "") {
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  const auto r = run_cli("train --data " + corpus + " --size tiny --max-len 32 --batch-size 4 "
                         "--max-steps 2 --threads 1 --out " + dir + "/run " + extra);
  EXPECT_EQ(r.code, 0) << r.output;
  return dir + "/run";
}

// `seqmix eval`'s line without its timing.
nlohmann::json eval_line(const std::string& run, const std::string& flags = "") {
  const auto r = run_cli("eval " + run + " --threads 1 " + flags);
  EXPECT_EQ(r.code, 0) << r.output;
  const auto rows = seqmix::testing::json_lines(r.output);
  if (rows.empty()) return {};
  nlohmann::json j = rows.back();
  j.erase("seconds");
  return j;
}

void expect_same_weights(const std::string& a, const std::string& b) {
  const auto x = train::load_run(a), y = train::load_run(b);
  const auto px = x.model->named_parameters(), py = y.model->named_parameters();
  ASSERT_EQ(px.size(), py.size());
  for (const auto& p : px) EXPECT_TRUE(at::equal(p.value(), py[p.key()])) << p.key();
  const auto bx = x.model->named_buffers(), by = y.model->named_buffers();
  ASSERT_EQ(bx.size(), by.size());
  for (const auto& p : bx) EXPECT_TRUE(at::equal(p.value(), by[p.key()])) << p.key();
}

// The tensors of a safetensors file, owning their bytes, for tests that rewrite them.
struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::vector<Stored> stored(const std::string& path) {
  const auto f = train::read_safetensors(path);
  std::vector<Stored> out;
  for (const auto& e : f.tensors)
    out.push_back({e.name, e.dtype, e.shape, std::string(f.data(e), e.end - e.begin)});
  return out;
}

void write_stored(const std::string& path, const std::vector<Stored>& tensors) {
  std::vector<train::SafetensorsTensor> t;
  for (const auto& s : tensors)
    t.push_back({s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size()});
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << train::safetensors_bytes(t, {{"format", "pt"}});
}

Stored* find(std::vector<Stored>& tensors, const std::string& name) {
  for (auto& s : tensors)
    if (s.name == name) return &s;
  return nullptr;
}

// The safetensors file `path` with its header rewritten by `change` (the buffer kept).
void with_header(const std::string& path,
                 const std::function<void(nlohmann::ordered_json&)>& change) {
  const std::string bytes = read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  change(header);
  const std::string text = header.dump();
  std::string out(8, '\0');
  const uint64_t size = text.size();
  std::memcpy(out.data(), &size, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out + text + bytes.substr(8 + n);
}

// No sibling a failed export could have left beside `dir`.
bool no_temporaries(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (contains(e.path().filename().string(), ".export-")) return false;
  return true;
}

}  // namespace

TEST(HfExport, ExportImportGivesTheSameWeightsAndEval) {
  const std::string dir = temp_dir("hf-roundtrip");
  const std::string run = tiny_run(dir);
  const std::string hf = dir + "/exports/wn-hf";  // its parent is created
  auto r = run_cli("export " + run + " --format hf --out " + hf);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "wrote folder '" + hf + "'")) << r.output;
  EXPECT_TRUE(fs::exists(hf + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(hf + "/tokenizer.model"));
  EXPECT_TRUE(no_temporaries(dir + "/exports"));

  // config.json as the Python side reads it: the fields, and the configuration exactly.
  const auto j = nlohmann::json::parse(read_text(hf + "/config.json"));
  const auto config = train::read_checkpoint_config(run + "/checkpoint.pt");
  EXPECT_EQ(j["model_type"], "seqmix");
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"SeqmixForCausalLM"}));
  EXPECT_EQ(j["hidden_size"], config.model.d_model);
  EXPECT_EQ(j["num_hidden_layers"], config.model.n_layers);
  EXPECT_EQ(j["num_attention_heads"], config.model.n_heads);
  EXPECT_EQ(j["max_position_embeddings"], 32);
  EXPECT_EQ(j["vocab_size"], 256);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["seqmix"]["format"], 1);
  EXPECT_EQ(j["seqmix"]["tokenizer"], "bytes");
  EXPECT_EQ(j["seqmix"]["config"]["train"]["beta2"].get<double>(), config.train.beta2);
  EXPECT_TRUE(j["seqmix"]["config"]["model"]["dropout"].is_number_float());

  // The same tensors as the pt export's state_dict, in their own dtypes.
  const auto tensors = stored(hf + "/model.safetensors");
  const auto loaded = train::load_run(run);
  size_t n = 0;
  for (const auto& p : loaded.model->named_parameters()) {
    ++n;
    const Stored* s = nullptr;
    for (const auto& t : tensors)
      if (t.name == p.key()) s = &t;
    ASSERT_NE(s, nullptr) << p.key();
    EXPECT_EQ(s->dtype, "F32");
    EXPECT_EQ(s->shape, p.value().sizes().vec());
    EXPECT_EQ(std::memcmp(s->bytes.data(), p.value().contiguous().data_ptr(), s->bytes.size()), 0);
  }
  EXPECT_EQ(tensors.size(), n + loaded.model->named_buffers().size());

  const std::string back = dir + "/back";
  r = run_cli("import " + hf + " --out " + back + " --model weird-net");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a Hugging Face folder, which holds its own configuration"))
      << r.output;
  EXPECT_FALSE(fs::exists(back));
  r = run_cli("import " + hf + " --out " + back);
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_weights(run, back);
  EXPECT_EQ(train::read_checkpoint_config(back + "/checkpoint.pt").to_toml(), config.to_toml());
  EXPECT_EQ(eval_line(back), eval_line(run));
  EXPECT_EQ(eval_line(back).value("loss", -1.0), eval_line(run).value("loss", -2.0));
  r = run_cli("train --out " + back + " --resume --max-steps 1");
  EXPECT_EQ(r.code, 0) << r.output;

  // A run folder or a folder of something else is not an export.
  r = run_cli("import " + run + " --out " + dir + "/x");
  EXPECT_TRUE(contains(r.output, "is a seqmix run folder, not an export")) << r.output;
  fs::create_directories(dir + "/other");
  r = run_cli("import " + dir + "/other --out " + dir + "/x");
  EXPECT_TRUE(contains(r.output, "is a folder without config.json")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/x"));
}

TEST(HfExport, AClassifierKeepsItsIntegerBuffers) {
  const std::string dir = temp_dir("hf-classifier");
  auto r = run_cli("train --task pathfinder --model etsmlp --set model.norm_type=\\\"batch\\\" "
                   "--set model.n_layers=1 --set model.d_model=16 --set model.d_ff=16 "
                   "--set data.train_examples=8 --set data.valid_examples=8 "
                   "--set data.test_examples=8 --batch-size 2 --max-steps 2 --threads 1 --out " +
                   dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("export " + dir + "/run --format hf --out " + dir + "/hf");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_text(dir + "/hf/config.json"));
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"SeqmixForSequenceClassification"}));
  bool has_i64 = false;
  for (const auto& t : stored(dir + "/hf/model.safetensors"))
    if (t.dtype == "I64") {
      has_i64 = true;
      EXPECT_TRUE(contains(t.name, "num_batches_tracked")) << t.name;
      EXPECT_TRUE(t.shape.empty()) << t.name;
    }
  EXPECT_TRUE(has_i64);
  r = run_cli("import " + dir + "/hf --out " + dir + "/back");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_weights(dir + "/run", dir + "/back");
  EXPECT_EQ(eval_line(dir + "/back", "--split test"), eval_line(dir + "/run", "--split test"));
}

TEST(HfExport, TheFolderIsReplacedOnlyWithOverwriteAndOnlyAnExport) {
  const std::string dir = temp_dir("hf-overwrite");
  const std::string run = tiny_run(dir);
  const std::string hf = dir + "/hf";
  auto exp = [&](const std::string& out, const std::string& flags = "") {
    return run_cli("export " + run + " --format hf --out " + out + " " + flags);
  };
  fs::create_directories(hf);  // empty: taken as it is
  ASSERT_EQ(exp(hf).code, 0);
  const std::string before = read_text(hf + "/model.safetensors");
  auto r = exp(hf);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "folder '" + hf + "' exists and is not empty; give --overwrite"))
      << r.output;
  // --overwrite replaces what an export writes and keeps what the user added (a model
  // card); a tokenizer.model is an export's file, gone when the new export has none.
  std::ofstream(hf + "/README.md") << "notes\n";
  std::ofstream(hf + "/tokenizer.model") << "stale";
  r = exp(hf, "--overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(hf + "/README.md"), "notes\n");
  EXPECT_FALSE(fs::exists(hf + "/tokenizer.model"));
  EXPECT_EQ(read_text(hf + "/model.safetensors"), before);
  EXPECT_TRUE(no_temporaries(dir));

  // Never replaced: a folder of something else, one with a subfolder, a run's folder.
  fs::create_directories(dir + "/notes");
  std::ofstream(dir + "/notes/a.txt") << "keep me\n";
  r = exp(dir + "/notes", "--overwrite");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "holds no export (config.json, model.safetensors)")) << r.output;
  EXPECT_EQ(read_text(dir + "/notes/a.txt"), "keep me\n");
  fs::create_directories(hf + "/sub");
  r = exp(hf, "--overwrite");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "holds 'sub', which is a folder")) << r.output;
  EXPECT_TRUE(fs::exists(hf + "/config.json"));
  fs::remove(hf + "/sub");
  r = exp(run, "--overwrite");
  EXPECT_TRUE(contains(r.output, "is a training run's folder")) << r.output;
  r = exp(run + "/hf", "--overwrite");
  EXPECT_TRUE(contains(r.output, "is inside a training run's folder")) << r.output;
  EXPECT_FALSE(fs::exists(run + "/hf"));

  // Nothing is written through or over a link, FIFO, device or file.
  fs::create_symlink(hf, dir + "/link");
  r = exp(dir + "/link", "--overwrite");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a symbolic link")) << r.output;
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  r = exp(dir + "/fifo", "--overwrite");
  EXPECT_TRUE(contains(r.output, "is a FIFO")) << r.output;
  r = exp("/dev/null", "--overwrite");
  EXPECT_TRUE(contains(r.output, "is a character device")) << r.output;
  std::ofstream(dir + "/file") << "x";
  r = exp(dir + "/file", "--overwrite");
  EXPECT_TRUE(contains(r.output, "is a regular file")) << r.output;
  r = exp(".", "--overwrite");
  EXPECT_TRUE(contains(r.output, "names no new folder")) << r.output;
  EXPECT_EQ(read_text(hf + "/model.safetensors"), before);

  // A run that cannot be read leaves nothing behind.
  r = run_cli("export " + dir + "/none --format hf --out " + dir + "/new");
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(fs::exists(dir + "/new"));
  EXPECT_TRUE(no_temporaries(dir));
  r = run_cli("export " + run + " --format onnx --out " + dir + "/new");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "--format")) << r.output;
}

TEST(HfExport, DamagedFoldersAreErrorsNamingTheFileAndTensor) {
  const std::string dir = temp_dir("hf-damaged");
  const std::string run = tiny_run(dir);
  const std::string hf = dir + "/hf";
  ASSERT_EQ(run_cli("export " + run + " --format hf --out " + hf).code, 0);
  const std::string weights = hf + "/model.safetensors";
  const std::string good = read_text(weights), good_config = read_text(hf + "/config.json");
  const auto tensors = stored(weights);
  const std::string named = "safetensors file '" + weights + "'";
  const std::string model_file = "export '" + weights + "'";
  auto import_error = [&](const std::string& expect) {
    const auto r = run_cli("import " + hf + " --out " + dir + "/back");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, expect)) << r.output;
    EXPECT_FALSE(fs::exists(dir + "/back"));
    std::ofstream(weights, std::ios::binary | std::ios::trunc) << good;
    std::ofstream(hf + "/config.json", std::ios::trunc) << good_config;
  };
  auto write_bytes = [&](const std::string& bytes) {
    std::ofstream(weights, std::ios::binary | std::ios::trunc) << bytes;
  };
  auto edit = [&](const std::function<void(std::vector<Stored>&)>& change) {
    auto t = tensors;
    change(t);
    write_stored(weights, t);
  };
  // The bytes of the file itself.
  write_bytes(good.substr(0, good.size() / 2));
  import_error(named + ": tensor '");
  write_bytes(good.substr(0, 5));
  import_error(named + " is corrupt: it holds 5 bytes");
  write_bytes(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + good.substr(8));
  import_error(named + " is corrupt: its header claims 9223372036854775807 bytes, more than");
  {
    std::string b = good;
    b[9] = '[';
    write_bytes(b);
    import_error(named + " is corrupt: its header is not valid JSON");
  }
  // Offsets edited in the header: the second tensor moved 4 bytes back, into the first.
  with_header(weights, [&](nlohmann::ordered_json& h) {
    auto& o = h[tensors[1].name]["data_offsets"];
    o = {o[0].get<uint64_t>() - 4, o[1].get<uint64_t>() - 4};
  });
  import_error(named + ": tensor '" + tensors[1].name + "' starts at byte " +
               std::to_string(tensors[0].bytes.size() - 4) + " of the buffer, where tensor '" +
               tensors[0].name + "' ends");
  with_header(weights, [&](nlohmann::ordered_json& h) { h["pos_emb"]["shape"] = {31, 64}; });
  import_error(named + ": tensor 'pos_emb' has shape [31, 64] and dtype F32 (7936 bytes) but "
                       "data_offsets [0,8192]");
  with_header(weights, [&](nlohmann::ordered_json& h) { h["pos_emb"]["dtype"] = "F31"; });
  import_error(named + ": tensor 'pos_emb' has dtype \"F31\"");
  // Well-formed files whose tensors do not fit the model.
  edit([&](auto& t) { find(t, "pos_emb")->dtype = "I32"; });  // same bytes, another dtype
  import_error(model_file + ": parameter 'pos_emb' holds Int values; seqmix reads float32");
  const std::string emb = "tok_emb.weight";
  edit([&](auto& t) {
    Stored* s = find(t, emb);
    ASSERT_NE(s, nullptr);
    s->dtype = "F16";
    s->bytes.resize(s->bytes.size() / 2);
  });
  import_error(model_file + ": parameter '" + emb + "' holds Half values; seqmix reads float32");
  edit([&](auto& t) {
    Stored* s = find(t, emb);
    s->shape = {s->shape[1], s->shape[0]};
  });
  import_error(model_file + ": parameter '" + emb + "' has shape [64, 256], the model's is "
                                                    "[256, 64]");
  edit([&](auto& t) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(find(t, emb)->bytes.data() + 8, &nan, 4);
  });
  import_error(model_file + " holds non-finite values in parameter '" + emb + "'");
  edit([&](auto& t) { t.push_back({"extra.weight", "F32", {1}, std::string(4, '\0')}); });
  import_error(model_file + " holds tensor 'extra.weight' that a model with this configuration "
                            "does not have");
  edit([&](auto& t) { t.erase(t.begin() + static_cast<std::ptrdiff_t>(t.size() - 1)); });
  import_error(model_file + " lacks ");
  // A float64 file reads (the Python side may write one).
  edit([&](auto& t) {
    for (auto& s : t) {
      if (s.dtype != "F32") continue;
      std::string d(s.bytes.size() * 2, '\0');
      for (size_t k = 0; k < s.bytes.size() / 4; ++k) {
        float f;
        std::memcpy(&f, s.bytes.data() + 4 * k, 4);
        const double v = f;
        std::memcpy(d.data() + 8 * k, &v, 8);
      }
      s.dtype = "F64";
      s.bytes = d;
    }
  });
  auto r = run_cli("import " + hf + " --out " + dir + "/f64");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_weights(run, dir + "/f64");
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << good;

  // config.json.
  const std::string config_file = "export '" + hf + "/config.json'";
  auto config_edit = [&](const std::function<void(nlohmann::json&)>& change) {
    auto j = nlohmann::json::parse(good_config);
    change(j);
    std::ofstream(hf + "/config.json", std::ios::trunc) << j.dump();
  };
  std::ofstream(hf + "/config.json", std::ios::trunc) << "{\"model_type\": ";
  import_error(config_file + " is not valid JSON");
  config_edit([](auto& j) { j["model_type"] = "llama"; });
  import_error(config_file + " has model_type \"llama\"; seqmix imports its own models");
  config_edit([](auto& j) { j["seqmix"]["format"] = 2; });
  import_error("has seqmix.format 2 (written by a newer seqmix)");
  config_edit([](auto& j) { j["hidden_size"] = 65; });
  import_error(config_file + " has hidden_size 65 but its model.d_model is 64");
  config_edit([](auto& j) { j["seqmix"]["config"]["model"]["d_model"] = 128; });
  import_error(config_file + " has hidden_size 64 but its model.d_model is 128");
  config_edit([](auto& j) { j["seqmix"]["config"]["model"]["colour"] = "red"; });
  import_error("model.colour");
  config_edit([](auto& j) { j["seqmix"]["config"]["train"]["lr"] = nullptr; });
  import_error("configuration value 'train.lr' is null");
  config_edit([](auto& j) { j["seqmix"]["tokenizer"] = "sentencepiece"; });
  import_error("has seqmix.tokenizer \"sentencepiece\" but data.tokenizer");
  std::ofstream(hf + "/tokenizer.model") << "x";
  import_error("is a byte-level run (seqmix.tokenizer \"bytes\") but also holds a "
               "tokenizer.model");
  fs::remove(hf + "/tokenizer.model");
  fs::remove(weights);
  import_error("is a folder without model.safetensors");
  EXPECT_EQ(run_cli("import " + hf + " --out " + dir + "/back").code, 0);
}

// A SentencePiece run (named for the tokenizer tests that scripts/sanitize.sh leaves out).
TEST(BpeRun, HfExportKeepsItsTokenizer) {
  const std::string dir = temp_dir("hf-bpe");
  const std::string corpus = seqmix::testing::tiny_corpus(dir);
  auto r = run_cli("tokenizer train --data " + corpus + " --vocab-size 300 --threads 1 --out " +
                   dir + "/bpe.model");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("train --data " + corpus + " --tokenizer " + dir + "/bpe.model --size tiny "
              "--max-len 32 --batch-size 4 --max-steps 2 --threads 1 --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("export " + dir + "/run --format hf --out " + dir + "/hf");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "config.json, tokenizer.model")) << r.output;
  EXPECT_EQ(read_text(dir + "/hf/tokenizer.model"), read_text(dir + "/bpe.model"));
  const auto j = nlohmann::json::parse(read_text(dir + "/hf/config.json"));
  EXPECT_EQ(j["seqmix"]["tokenizer"], "sentencepiece");
  EXPECT_EQ(j["vocab_size"], 300);
  fs::remove(dir + "/bpe.model");  // the folder carries it
  r = run_cli("import " + dir + "/hf --out " + dir + "/back");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(dir + "/back/tokenizer.model"), read_text(dir + "/hf/tokenizer.model"));
  expect_same_weights(dir + "/run", dir + "/back");
  EXPECT_EQ(eval_line(dir + "/back"), eval_line(dir + "/run"));
  r = run_cli("generate " + dir + "/back --prompt 'the ' --max-new-tokens 5 --seed 1");
  EXPECT_EQ(r.code, 0) << r.output;

  fs::remove(dir + "/hf/tokenizer.model");
  r = run_cli("import " + dir + "/hf --out " + dir + "/back2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "is a SentencePiece run")) << r.output;
  EXPECT_TRUE(contains(r.output, "holds no tokenizer.model")) << r.output;
  std::ofstream(dir + "/hf/tokenizer.model") << "not a model";
  r = run_cli("import " + dir + "/hf --out " + dir + "/back2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "tokenizer.model")) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/back2"));
}
