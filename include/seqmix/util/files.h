#pragma once
/// @file files.h
/// Whole-file reads and atomic writes, shared by the corpus, tokenizer, trainer and compare.
#include <string>

namespace seqmix::util {

/// The bytes of `path`.
/// @throws std::runtime_error "cannot open '<path>' for reading" or "error while reading
///         '<path>'".
std::string read_file(const std::string& path);

/// Writes `bytes` to `<path>.tmp` and renames it over `path`, so a failed or interrupted
/// write never replaces a good file (the temporary is removed on failure).
/// @throws std::runtime_error naming the file that could not be written or renamed.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Writes `bytes` to a new private file (mode 0600) in $TMPDIR (or /tmp) whose name starts
/// with `prefix`; returns its path. The caller removes it.
/// @throws std::runtime_error naming the folder if the file cannot be created or written.
std::string write_temp_file(const std::string& bytes, const std::string& prefix);

}  // namespace seqmix::util
