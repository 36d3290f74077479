#pragma once
/// @file files.h
/// Whole-file reads and atomic writes, shared by the corpus, tokenizer, trainer and compare.
#include <string>

namespace seqmix::util {

/// The bytes of `path`.
/// @throws std::runtime_error "cannot open '<path>' for reading" or "error while reading
///         '<path>'".
std::string read_file(const std::string& path);

/// What `path` is, without following a final symbolic link or opening it: "a regular file",
/// "a folder", "a symbolic link", "a FIFO", "a character device", "a block device", "a
/// socket" or "a special file"; null when it does not exist.
const char* file_type_description(const std::string& path);

/// Throws unless `path` does not exist or is a regular file: the check of every writer that
/// replaces an output (write_file_atomic, plot's picture, the tokenizer's model file).
/// @throws std::runtime_error "'<path>' is a FIFO; seqmix writes only regular files ...".
void check_replaceable(const std::string& path);

/// Writes `bytes` to `<path>.tmp` and renames it over `path`, so a failed or interrupted
/// write never replaces a good file (the temporary is removed on failure). `path` (and the
/// temporary) must be absent or regular files (check_replaceable): a device, FIFO, folder or
/// symbolic link is never replaced.
/// @throws std::runtime_error naming the file that could not be written or renamed, or the
///         path that is not a regular file.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Writes `bytes` to a new private file (mode 0600) in $TMPDIR (or /tmp) whose name starts
/// with `prefix`; returns its path. The caller removes it.
/// @throws std::runtime_error naming the folder if the file cannot be created or written.
std::string write_temp_file(const std::string& bytes, const std::string& prefix);

}  // namespace seqmix::util
