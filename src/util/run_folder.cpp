#include "seqmix/util/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace seqmix::util {

namespace fs = std::filesystem;

FolderLock::FolderLock(const std::string& dir, const std::string& what) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0)
    throw std::runtime_error("cannot open " + what + " '" + dir + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw std::runtime_error(what + " '" + dir +
                               "' is in use by another seqmix process; wait for it to finish or "
                               "choose another folder");
    throw std::runtime_error("cannot lock " + what + " '" + dir + "': " + std::strerror(err));
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

std::vector<std::string> run_files_in(const std::string& dir) {
  std::vector<std::string> found;
  for (const char* name : {"checkpoint.pt", "config.toml", "metrics.jsonl"}) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / name, ec)) found.emplace_back(name);
  }
  return found;
}

void check_path_text(const std::string& path, const std::string& what) {
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      std::string shown;
      for (const char d : path) {
        const auto v = static_cast<unsigned char>(d);
        if (v < 0x20 || v == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", v);
          shown += buf;
        } else {
          shown += d;
        }
      }
      throw std::invalid_argument(what + ": '" + shown +
                                  "' contains a control character (a path may not)");
    }
  }
}

}  // namespace seqmix::util
