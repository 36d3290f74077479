#pragma once
// Test support: scratch folders under the test temp dir.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace seqmix::testing {

/// A fresh folder under $TMPDIR (or /tmp) named after `name` and the process, removed first
/// if it exists.
inline std::string temp_dir(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  std::string dir =
      std::string(base ? base : "/tmp") + "/seqmix-test-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace seqmix::testing
