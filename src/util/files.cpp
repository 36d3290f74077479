#include "seqmix/util/files.h"

#include "seqmix/util/signals.h"

#include <fcntl.h>
#include <sys/stat.h>
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

const char* file_type_description(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return nullptr;
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

void check_replaceable(const std::string& path) {
  const char* kind = file_type_description(path);
  if (kind && std::strcmp(kind, "a regular file") != 0)
    throw std::runtime_error("'" + path + "' is " + kind +
                             "; seqmix writes only regular files and replaces only those: "
                             "give another path, or remove it first");
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  // A Ctrl-C while the temporary is written waits until it is renamed or removed.
  const HoldStopSignals hold;
  const std::string tmp = path + ".tmp";
  // Renaming over `path` would replace whatever it is: a device (/dev/null, as root), a
  // FIFO, a symbolic link (not the file it points to). Only a regular file is replaced.
  check_replaceable(path);
  check_replaceable(tmp);
  auto fail = [&](const std::string& what, int err) {
    std::remove(tmp.c_str());
    throw std::runtime_error(what + ": " + std::strerror(err));
  };
  // O_NOFOLLOW and O_NONBLOCK: a link or FIFO made at `tmp` since the check is an error,
  // never followed or waited on.
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("cannot write '" + tmp + "': not a regular file");
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
  check_replaceable(path);  // made a link or FIFO while the file was written
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
