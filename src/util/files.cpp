#include "seqmix/util/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace seqmix::util {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "' for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("error while reading '" + path + "'");
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what, int err) {
    std::remove(tmp.c_str());
    throw std::runtime_error(what + ": " + std::strerror(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(err));
  }
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("cannot write '" + tmp + "'", err);
    }
    done += static_cast<size_t>(n);
  }
  // On disk before the rename makes it the file: a crash then leaves the old file or the
  // whole new one, never a torn one.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot write '" + tmp + "'", err);
  }
  if (::close(fd) != 0) fail("cannot write '" + tmp + "'", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename '" + tmp + "' to '" + path + "'", errno);
}

std::string write_temp_file(const std::string& bytes, const std::string& prefix) {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env && *env ? env : "/tmp";
  std::string path = dir + "/" + prefix + "-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0)
    throw std::runtime_error("cannot create a temporary file in '" + dir + "': " +
                             std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      std::remove(path.c_str());
      throw std::runtime_error("cannot write the temporary file '" + path + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

}  // namespace seqmix::util
