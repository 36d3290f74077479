#pragma once
// A `gnuplot` that fails, put first on PATH: how the plot tests reach the error paths.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace seqmix::testing {

/// Sets PATH for the scope of the object.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& path) {
    const char* old = std::getenv("PATH");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("PATH", path.c_str(), 1);
  }
  ~ScopedPath() {
    if (had_)
      ::setenv("PATH", old_.c_str(), 1);
    else
      ::unsetenv("PATH");
  }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

/// A folder holding an executable `gnuplot` that prints a message and exits 1.
inline std::string fake_failing_gnuplot(const std::string& dir) {
  const std::string bin = dir + "/fakebin";
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/gnuplot") << "#!/bin/sh\necho 'fake gnuplot: broken' >&2\nexit 1\n";
  ::chmod((bin + "/gnuplot").c_str(), 0755);
  return bin;
}

}  // namespace seqmix::testing
