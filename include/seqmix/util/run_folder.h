#pragma once
/// @file run_folder.h
/// A run folder belongs to one run (docs/ARCHITECTURE.md, "Training, checkpoints"): it is locked while a
/// process trains in it, a run already in it is never replaced without an explicit
/// `--overwrite`, and a process that fails before it has written its first checkpoint leaves
/// the folder as it found it.
#include <string>
#include <vector>

namespace seqmix::util {

/// An exclusive advisory lock (flock(2)) on a folder, held until destruction. The lock is on
/// the folder itself, so no lock file is left behind, and the kernel drops it when the
/// process dies, however it dies. Child processes do not inherit it (close-on-exec).
class FolderLock {
 public:
  /// Locks `dir` (which must exist) without waiting.
  /// @throws std::runtime_error "<what> '<dir>' is in use by another seqmix process" if
  ///         another process holds it, or naming the folder if it cannot be opened.
  FolderLock(const std::string& dir, const std::string& what);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

/// The files that make a folder a seqmix run folder (checkpoint.pt, config.toml,
/// metrics.jsonl) that exist in `dir`.
std::vector<std::string> run_files_in(const std::string& dir);

/// Rejects a path a user gave (a flag or key named by `what`) that holds control characters
/// (bytes below 0x20, and 0x7f): they have no business in a file name, and a newline in a
/// path is how text formats that embed paths get broken out of.
/// @throws std::invalid_argument "<what>: '<path shown escaped>' contains a control character".
void check_path_text(const std::string& path, const std::string& what);

}  // namespace seqmix::util
