#pragma once
/// @file tokenizer.h
/// Tokenizers: bytes (every byte 0..255 is a token) or a SentencePiece model (Kudo &
/// Richardson 2018), e.g. the BPE model `seqmix tokenizer train` writes, and the token
/// corpus built from a text corpus with either.
///
/// BPE models trained here are exactly invertible: identity normalisation, no extra-
/// whitespace removal, no dummy "▁" prefix and byte fallback (any byte not covered by a piece
/// becomes one of 256 byte pieces <0x00>..<0xFF>), so decode(encode(text)) == text for every
/// valid UTF-8 text and a token stream can be cut anywhere. (U+2581, SentencePiece's internal
/// space symbol, is encoded as its three byte pieces, since as a piece it decodes to a space.)
/// SentencePiece checks UTF-8 before encoding: a malformed byte sequence is encoded as U+FFFD
/// (the byte tokenizer keeps it).
///
/// SentencePiece runs inside a small plugin, libseqmix_sentencepiece.so, loaded on first use
/// (see src/data/sentencepiece_plugin.cpp for why it cannot be linked directly next to
/// LibTorch). It is looked for at $SEQMIX_SENTENCEPIECE_PLUGIN, next to the executable, by
/// bare name through the loader's search (the RUNPATH an installed seqmix package gives its
/// programs, LD_LIBRARY_PATH), then where the build put it (src/data/tokenizer.cpp).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace seqmix::data {

class ByteCorpus;

/// A sequence of token ids in [0, vocab_size).
using TokenIds = std::vector<int32_t>;

/// Options of `Tokenizer::train` (SentencePiece TrainerSpec names in brackets).
struct TokenizerOptions {
  int64_t vocab_size = 5000;           ///< pieces in the model, byte pieces included [vocab_size]
  std::string model_type = "bpe";      ///< bpe | unigram [model_type]
  int64_t max_sentences = 2000000;     ///< lines sampled: 0 = all, else > 100
  int64_t max_sentence_length = 8192;  ///< longer lines are skipped, bytes [max_sentence_length]
  int64_t seed = 1337;                 ///< sampling of lines when there are more than max_sentences
  int64_t threads = 0;                 ///< trainer threads (0 = hardware threads) [num_threads]
  /// What the text is (a corpus name or path), for the announcement lines; empty: "the text".
  std::string source;
  /// One line on stderr before SentencePiece starts (what it trains on) and one when it ends
  /// (how long it took): training on a large corpus takes minutes with no output otherwise.
  bool announce = true;
};

class Tokenizer {
 public:
  /// The byte tokenizer (vocab_size 256, token = byte value).
  static Tokenizer bytes();
  /// Reads a SentencePiece model file (".model", a serialized ModelProto), the value of
  /// data.tokenizer.
  /// @throws std::runtime_error naming the key and the path if it is missing, not a regular
  ///         file (a FIFO or device is refused without blocking), unreadable or not a
  ///         SentencePiece model.
  static Tokenizer load(const std::string& path);
  /// Parses a serialized SentencePiece ModelProto; `origin` names it in errors.
  /// @throws std::runtime_error naming origin if the bytes are not a SentencePiece model.
  static Tokenizer from_serialized(const std::string& proto, const std::string& origin);
  /// Trains a SentencePiece model on `text` (one training sentence per non-empty line).
  /// Options are checked first: vocab_size in [260, 2^24] (256 byte pieces, <unk>, <s>, </s>
  /// and at least one character), max_sentences 0 or > 100, max_sentence_length >= 1, seed in
  /// [0, 2^32), threads in [0, 4x the hardware threads].
  /// @throws std::invalid_argument naming the option and its `seqmix tokenizer train` flag;
  ///         std::runtime_error "tokenizer training failed: ..." when SentencePiece fails, its
  ///         message re-worded where it is known (a vocabulary too large or too small for
  ///         the text says the bound, out of memory says so) and quoted after it.
  static Tokenizer train(const std::string& text, const TokenizerOptions& options);

  bool is_bytes() const { return sp_ == nullptr; }
  /// V: 256 for bytes, the number of pieces for SentencePiece.
  int64_t vocab_size() const;
  /// "bytes", or "sentencepiece-<type>-<V>".
  std::string name() const;

  TokenIds encode(const std::string& text) const;
  /// encode(text) in pieces of about `chunk_bytes` cut after a newline, calling
  /// util::check_interrupt() between them, so that a Ctrl-C stops the encoding of a large
  /// corpus promptly. The same ids as encode(text) where no piece of the model holds a
  /// newline (SentencePiece's segments on either side of one are then independent; models
  /// from `seqmix tokenizer train` never do: they learn from lines); otherwise encoded whole.
  TokenIds encode_interruptible(const std::string& text, size_t chunk_bytes = 4 << 20) const;
  /// @throws std::out_of_range naming the first id outside [0, vocab_size).
  std::string decode(const TokenIds& ids) const;

  /// The serialized ModelProto (empty for bytes): what checkpoints store.
  const std::string& serialized() const { return proto_; }
  /// Writes the model file atomically (`path.tmp` renamed over `path`).
  /// @throws std::logic_error for the byte tokenizer; std::runtime_error naming the path if it
  ///         cannot be written (an existing file is left as it was).
  void save(const std::string& path) const;

  /// True if both are bytes or both hold the same SentencePiece model.
  bool same_as(const Tokenizer& other) const { return proto_ == other.proto_; }

 private:
  std::shared_ptr<void> sp_;  ///< SentencePieceProcessor inside the plugin (tokenizer.cpp)
  std::string proto_;
};

/// The token streams a model trains and is evaluated on: a ByteCorpus's two splits encoded
/// with one tokenizer (each split encoded whole, so no token straddles the split).
struct TokenCorpus {
  TokenIds train, eval;
  int64_t eval_bytes = 0;   ///< bytes of held-out text, the denominator of bits per byte
  std::string description;  ///< the corpus description plus the token counts

  /// @throws std::runtime_error if either split encodes to fewer than 2 tokens.
  static TokenCorpus build(const ByteCorpus& corpus, const Tokenizer& tokenizer);
};

/// A training batch of `batch` random crops of `len + 1` tokens from `tokens`, as int64
/// [batch, len + 1]. The crops depend only on (seed, step), not on the model or on anything
/// sampled before, so runs with the same seed see the same batches in the same order (what
/// `seqmix compare` relies on) and a resumed run continues the sequence exactly.
/// @throws std::runtime_error if tokens holds fewer than len + 1 ids.
at::Tensor sample_batch(const TokenIds& tokens, int64_t batch, int64_t len, uint64_t seed,
                        int64_t step);

/// Ids [offset, offset + n) of `tokens` as int64 [n].
at::Tensor tokens_to_tensor(const TokenIds& tokens, int64_t offset, int64_t n);

}  // namespace seqmix::data
