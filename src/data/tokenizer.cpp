#include "seqmix/data/tokenizer.h"

#include <dlfcn.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/util/files.h"
#include "seqmix/util/memory.h"
#include "seqmix/util/signals.h"

namespace seqmix::data {

namespace fs = std::filesystem;

namespace {

// The C interface of src/data/sentencepiece_plugin.cpp.
struct Plugin {
  void (*free)(void*);
  int (*load)(const char*, size_t, void**, char**);
  void (*unload)(void*);
  int (*size)(void*);
  int (*encode)(void*, const char*, size_t, int32_t**, size_t*, char**);
  int (*decode)(void*, const int32_t*, size_t, char**, size_t*, char**);
  int (*train)(const char*, size_t, const char* const*, const char* const*, size_t, char**,
               size_t*, char**);
};

const Plugin& plugin() {
  static const Plugin p = [] {
    // Where the plugin is looked for, first found wins:
    //  1. $SEQMIX_SENTENCEPIECE_PLUGIN, a path: the override for any other layout, and then
    //     the only place looked (a path that does not load is an error naming it, never a
    //     silent fall back to another copy);
    //  2. next to the executable (the build tree's CLI, or a program shipped with the plugin);
    //  3. the bare file name, i.e. the dynamic loader's search from the program: its RUNPATH,
    //     which an installed seqmix sets to <prefix>/<libdir>/seqmix for every program linked
    //     against it (cmake/SeqmixInstall.cmake; libseqmix is static, so it cannot locate
    //     itself at run time), then LD_LIBRARY_PATH and the system folders;
    //  4. where this build put it (compiled in): the tests, run from the build tree.
    // The installation comes before the build tree, so an installed program does not load a
    // plugin from a build tree that was rebuilt since.
    const std::string file_name = "libseqmix_sentencepiece.so";
    std::vector<std::string> candidates;
    const char* env = std::getenv("SEQMIX_SENTENCEPIECE_PLUGIN");
    if (env) {
      if (!*env || std::string(env) == file_name)
        throw std::runtime_error("SEQMIX_SENTENCEPIECE_PLUGIN is set to '" + std::string(env) +
                                 "'; expected the path of libseqmix_sentencepiece.so (or unset "
                                 "it to use the installed one)");
      candidates.push_back(env);
    } else {
      std::error_code ec;
      const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
      if (!ec) candidates.push_back((exe.parent_path() / file_name).string());
      candidates.push_back(file_name);
      candidates.push_back(SEQMIX_SENTENCEPIECE_PLUGIN_PATH);
    }
    std::string tried;
    void* handle = nullptr;
    for (const auto& c : candidates) {
      if (c == file_name) {
        handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (handle) break;
        tried += "\n  " + c + " (the loader's search path): " + dlerror();
        continue;
      }
      if (!fs::is_regular_file(c)) {
        tried += "\n  " + c + ": not found";
        continue;
      }
      // Local and deep-bound: SentencePiece's own protobuf copy stays out of LibTorch's way.
      handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle) break;
      tried += "\n  " + c + ": " + dlerror();
    }
    if (!handle && env)
      throw std::runtime_error("SEQMIX_SENTENCEPIECE_PLUGIN: cannot load '" + std::string(env) +
                               "':" + tried.substr(tried.find(':') + 1) +
                               " (give the path of libseqmix_sentencepiece.so, or unset it)");
    if (!handle)
      throw std::runtime_error("SentencePiece support is not available: cannot load "
                               "libseqmix_sentencepiece.so (build it with scripts/build.sh, "
                               "reinstall seqmix, or set SEQMIX_SENTENCEPIECE_PLUGIN); tried:" +
                               tried);
    auto sym = [&](const char* name) {
      void* f = dlsym(handle, name);
      if (!f)
        throw std::runtime_error(std::string("libseqmix_sentencepiece.so lacks ") + name +
                                 " (a stale build? rerun scripts/build.sh)");
      return f;
    };
    Plugin q{};
    q.free = reinterpret_cast<decltype(q.free)>(sym("seqmix_spm_free"));
    q.load = reinterpret_cast<decltype(q.load)>(sym("seqmix_spm_load"));
    q.unload = reinterpret_cast<decltype(q.unload)>(sym("seqmix_spm_unload"));
    q.size = reinterpret_cast<decltype(q.size)>(sym("seqmix_spm_size"));
    q.encode = reinterpret_cast<decltype(q.encode)>(sym("seqmix_spm_encode"));
    q.decode = reinterpret_cast<decltype(q.decode)>(sym("seqmix_spm_decode"));
    q.train = reinterpret_cast<decltype(q.train)>(sym("seqmix_spm_train"));
    return q;
  }();
  return p;
}

// SentencePiece's status text without its code name and source location: "Internal:
// ./src/trainer_interface.cc(660) [(...) == (...)] Vocabulary size too high (5000)." becomes
// "Vocabulary size too high (5000).", and "Internal: ./src/sentencepiece_processor.cc(232)
// [model_proto->ParseFromArray(...)]" (a location and nothing else) becomes "".
std::string spm_reason(std::string msg) {
  static const char* const codes[] = {
      "Cancelled: ",       "Unknown: ",           "Invalid argument: ", "Deadline exceeded: ",
      "Not found: ",       "Already exists: ",    "Permission denied: ", "Unauthenticated: ",
      "Resource exhausted: ", "Failed precondition: ", "Aborted: ",   "Out of range: ",
      "Unimplemented: ",   "Internal: ",          "Unavailable: ",      "Data loss: "};
  for (const char* c : codes)
    if (msg.rfind(c, 0) == 0) {
      msg.erase(0, std::char_traits<char>::length(c));
      break;
    }
  // A location is "<path>(<line>) [<expression>]", then the message, if any.
  const auto paren = msg.find(") [");
  if (paren != std::string::npos && msg.find(' ') > paren && paren > 0) {
    const auto close = msg.find("] ", paren);
    if (close != std::string::npos)
      msg.erase(0, close + 2);
    else if (!msg.empty() && msg.back() == ']')
      msg.clear();
  }
  while (!msg.empty() && std::isspace(static_cast<unsigned char>(msg.back()))) msg.pop_back();
  return msg;
}

// Takes ownership of a message the plugin allocated; returns SentencePiece's reason only.
std::string take_error(char* err) {
  std::string s = err ? err : "";
  plugin().free(err);
  return spm_reason(s);
}

// ": <reason>" or, if SentencePiece gave none, "".
std::string because(const std::string& reason) { return reason.empty() ? "" : ": " + reason; }

}  // namespace

Tokenizer Tokenizer::bytes() { return Tokenizer(); }

Tokenizer Tokenizer::from_serialized(const std::string& proto, const std::string& origin) {
  const Plugin& p = plugin();
  void* model = nullptr;
  char* err = nullptr;
  if (proto.empty() || p.load(proto.data(), proto.size(), &model, &err) != 0) {
    // A file that does not parse as a ModelProto gets SentencePiece's location only; a model
    // that parses but is unusable gets its reason ("the model holds no pieces").
    const std::string reason = proto.empty() ? "it is empty" : take_error(err);
    throw std::runtime_error(origin +
                             " is not a SentencePiece model (expected a .model file written by "
                             "`seqmix tokenizer train` or spm_train" +
                             (reason.empty() ? std::string() : "; " + reason) + ")");
  }
  Tokenizer t;
  t.sp_ = std::shared_ptr<void>(model, [](void* m) { plugin().unload(m); });
  t.proto_ = proto;
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string key = "data.tokenizer";
  std::error_code ec;
  if (!fs::exists(fs::status(path, ec)))  // stat only: a FIFO is never opened here
    throw std::runtime_error(key + ": tokenizer model '" + path +
                             "' does not exist (give 'bytes' or a .model file written by "
                             "`seqmix tokenizer train`)");
  return from_serialized(read_regular_file(path, key), key + ": tokenizer model '" + path + "'");
}

namespace {

// The first integer after `marker` in `text` (-1 if none).
int64_t number_after(const std::string& text, const std::string& marker) {
  const auto at = text.find(marker);
  if (at == std::string::npos) return -1;
  size_t i = at + marker.size();
  while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  int64_t v = -1;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i)
    v = (v < 0 ? 0 : v) * 10 + (text[i] - '0');
  return v;
}

// SentencePiece's reason for a failed training (spm_reason), re-worded for a user of
// `seqmix tokenizer train`; the reason follows in brackets.
std::string explain_training_failure(const std::string& reason, const TokenizerOptions& o,
                                     size_t text_bytes) {
  const std::string vs = "`vocab_size` " + std::to_string(o.vocab_size);
  std::string head;
  if (reason.find("Vocabulary size too high") != std::string::npos) {
    const int64_t most = number_after(reason, "<=");
    head = vs + " is larger than the corpus allows" +
           (most > 0 ? ": at most " + std::to_string(most) + " pieces for this text" : "") +
           "; lower `vocab_size` or train on more text";
  } else if (reason.find("smaller than required_chars") != std::string::npos) {
    const int64_t least = number_after(reason, " vs ");
    head = vs + " is too small for this corpus" +
           (least > 0 ? ": it needs at least " + std::to_string(least) : std::string()) +
           " (256 byte pieces, 3 special pieces and one piece per distinct character)";
  } else if (reason.find("bad_alloc") != std::string::npos ||
             reason.find("out of memory") != std::string::npos) {
    head = "out of memory training on " + std::to_string(text_bytes) + " bytes with " + vs +
           "; lower `max_sentences` or `vocab_size`";
  } else if (reason.find("No sentences") != std::string::npos ||
             reason.find("empty") != std::string::npos) {
    head = "the text has no usable line (lines longer than " +
           std::to_string(o.max_sentence_length) + " bytes are skipped)";
  } else {
    return "tokenizer training failed" + (reason.empty() ? std::string(" (SentencePiece gave no reason)") : ": " + reason);
  }
  return "tokenizer training failed: " + head + " (SentencePiece: " + reason + ")";
}

std::string seconds(double s) {
  std::ostringstream ss;
  ss.setf(std::ios::fixed);
  ss.precision(s < 10 ? 1 : 0);
  ss << s << " s";
  return ss.str();
}

}  // namespace

Tokenizer Tokenizer::train(const std::string& text, const TokenizerOptions& o) {
  auto bad = [](const std::string& option, const std::string& what) {
    throw std::invalid_argument("tokenizer: " + option + " must be " + what);
  };
  if (o.model_type != "bpe" && o.model_type != "unigram")
    bad("`model_type`", "bpe or unigram, got '" + o.model_type + "'");
  // 256 byte pieces plus <unk>, <s>, </s> are always in the vocabulary, and one piece per
  // distinct character of the text (character_coverage 1.0).
  if (o.vocab_size < 260 || o.vocab_size > (int64_t{1} << 24))
    bad("`vocab_size`",
        "in [260, 16777216] (256 byte pieces, 3 special pieces and the text's characters are "
        "always included), got " + std::to_string(o.vocab_size));
  // SentencePiece's trainer refuses samples of 1 to 100 lines with a bare status.
  if (o.max_sentences < 0 || (o.max_sentences > 0 && o.max_sentences <= 100))
    bad("`max_sentences`",
        "0 (all lines) or more than 100 (SentencePiece samples no fewer), got " +
            std::to_string(o.max_sentences));
  if (o.max_sentence_length < 1 || o.max_sentence_length > (int64_t{1} << 30))
    bad("max_sentence_length", "in [1, 2^30] bytes, got " + std::to_string(o.max_sentence_length));
  if (o.seed < 0 || o.seed > int64_t{0xffffffff})
    bad("`seed`", "in [0, 4294967295], got " + std::to_string(o.seed));
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (o.threads < 0 || o.threads > 4 * hw)
    bad("`threads`", "in [0, " + std::to_string(4 * hw) + "] (0: all; 4x this "
        "machine's " + std::to_string(hw) + " hardware threads at most), got " +
        std::to_string(o.threads));
  const int64_t threads = o.threads > 0 ? o.threads : hw;
  // SentencePiece skips lines longer than max_sentence_length and then fails without saying
  // why when none is left (a corpus of one long line per document, such as SOTU's files).
  bool usable_line = false;
  for (size_t start = 0; start < text.size() && !usable_line;) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const size_t length = end - start;
    usable_line = length > 0 && static_cast<int64_t>(length) <= o.max_sentence_length;
    start = end + 1;
  }
  if (!usable_line)
    throw std::runtime_error(
        "tokenizer training failed: the text has no line of 1 to " +
        std::to_string(o.max_sentence_length) +
        " bytes (SentencePiece skips longer lines); break it into shorter lines, e.g. with "
        "`fold -s -w 400`");
  // Why these settings: see the file comment of tokenizer.h (exact invertibility).
  const std::vector<std::pair<std::string, std::string>> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"split_digits", "false"},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"random_seed", std::to_string(o.seed)},
      {"num_threads", std::to_string(threads)},
  };
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : args) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  const Plugin& p = plugin();
  const std::string what = o.source.empty() ? "the text" : o.source;
  if (o.announce)
    std::fprintf(stderr, "tokenizer: training %s (%lld pieces) on %zu bytes of %s ...\n",
                 o.model_type == "bpe" ? "BPE" : "unigram", static_cast<long long>(o.vocab_size),
                 text.size(), what.c_str());
  const auto start = std::chrono::steady_clock::now();
  char *proto = nullptr, *err = nullptr;
  size_t n = 0;
  if (p.train(text.data(), text.size(), keys.data(), values.data(), keys.size(), &proto, &n,
              &err) != 0)
    throw std::runtime_error(explain_training_failure(take_error(err), o, text.size()));
  std::string bytes;
  try {
    bytes.assign(proto, n);
  } catch (...) {
    p.free(proto);
    throw;
  }
  p.free(proto);
  if (o.announce)
    std::fprintf(stderr, "tokenizer: trained in %s\n",
                 seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                             .count())
                     .c_str());
  return from_serialized(bytes, "the trained tokenizer");
}

int64_t Tokenizer::vocab_size() const { return sp_ ? plugin().size(sp_.get()) : 256; }

std::string Tokenizer::name() const {
  if (!sp_) return "bytes";
  // The model type is in the ModelProto, which Debian ships no protobuf header for.
  return "sentencepiece-" + std::to_string(vocab_size());
}

TokenIds Tokenizer::encode(const std::string& text) const {
  if (!sp_) {
    TokenIds ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  int32_t* ids = nullptr;
  size_t n = 0;
  char* err = nullptr;
  if (plugin().encode(sp_.get(), text.data(), text.size(), &ids, &n, &err) != 0)
    throw std::runtime_error("tokenizer: cannot encode text" + because(take_error(err)));
  TokenIds out(ids, ids + n);
  plugin().free(ids);
  return out;
}

TokenIds Tokenizer::encode_interruptible(const std::string& text, size_t chunk_bytes) const {
  // Whether any piece decodes to text holding a newline (then segments could join across
  // one); a vocabulary too large to look through is encoded whole.
  bool newline_piece = true;
  if (sp_ && vocab_size() <= (int64_t{1} << 20)) {
    newline_piece = false;
    const TokenIds newline = encode("\n");  // its byte piece <0x0A>
    for (int32_t id = 0; id < vocab_size() && !newline_piece; ++id)
      newline_piece = decode({id}).find('\n') != std::string::npos && newline != TokenIds{id};
  }
  if (!sp_ || newline_piece || text.size() <= chunk_bytes) {
    util::check_interrupt();
    TokenIds ids = encode(text);
    util::check_interrupt();
    return ids;
  }
  TokenIds out;
  for (size_t begin = 0; begin < text.size();) {
    util::check_interrupt();
    size_t end = text.find('\n', std::min(text.size(), begin + std::max<size_t>(1, chunk_bytes)));
    end = end == std::string::npos ? text.size() : end + 1;
    const TokenIds part = encode(text.substr(begin, end - begin));
    out.insert(out.end(), part.begin(), part.end());
    begin = end;
  }
  util::check_interrupt();
  return out;
}

std::string Tokenizer::decode(const TokenIds& ids) const {
  const int64_t V = vocab_size();
  for (const int32_t id : ids)
    if (id < 0 || id >= V)
      throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(V) + ")");
  if (!sp_) return std::string(ids.begin(), ids.end());
  char* text = nullptr;
  size_t n = 0;
  char* err = nullptr;
  if (plugin().decode(sp_.get(), ids.data(), ids.size(), &text, &n, &err) != 0)
    throw std::runtime_error("tokenizer: cannot decode" + because(take_error(err)));
  std::string out(text, n);
  plugin().free(text);
  return out;
}

void Tokenizer::save(const std::string& path) const {
  if (!sp_) throw std::logic_error("the byte tokenizer has no model file");
  util::write_file_atomic(path, proto_);
}

TokenCorpus TokenCorpus::build(const ByteCorpus& corpus, const Tokenizer& tokenizer) {
  // At most one token per byte, 4 bytes each: checked before encoding starts.
  util::check_available_memory(
      static_cast<double>(sizeof(TokenIds::value_type)) *
          static_cast<double>(corpus.train().size() + corpus.eval().size()),
      "data: the tokens of '" + corpus.description() + "' (up to one per byte, 4 bytes each)",
      "; use a smaller corpus or free memory");
  TokenCorpus c;
  c.train = tokenizer.encode_interruptible(corpus.train());
  c.eval = tokenizer.encode_interruptible(corpus.eval());
  c.eval_bytes = static_cast<int64_t>(corpus.eval().size());
  if (c.train.size() < 2 || c.eval.size() < 2)
    throw std::runtime_error("data: the corpus encodes to " + std::to_string(c.train.size()) +
                             " training and " + std::to_string(c.eval.size()) +
                             " held-out tokens; at least 2 each are needed");
  c.description = corpus.description();
  if (!tokenizer.is_bytes())
    c.description += " = " + std::to_string(c.train.size()) + " / " +
                     std::to_string(c.eval.size()) + " tokens (" + tokenizer.name() + ")";
  return c;
}

at::Tensor tokens_to_tensor(const TokenIds& tokens, int64_t offset, int64_t n) {
  at::Tensor t = at::empty({n}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = tokens[static_cast<size_t>(offset + i)];
  return t;
}

at::Tensor sample_batch(const TokenIds& tokens, int64_t batch, int64_t len, uint64_t seed,
                        int64_t step) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < len + 1)
    throw std::runtime_error("data: the training split has " + std::to_string(n) +
                             " tokens, fewer than max_len + 1 = " + std::to_string(len + 1));
  // One independent stream per (seed, step): batches do not depend on anything drawn before.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0x5e9u};
  std::mt19937_64 rng(seq);
  std::uniform_int_distribution<int64_t> offset(0, n - (len + 1));
  at::Tensor out = at::empty({batch, len + 1}, at::kLong);
  int64_t* p = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t o = offset(rng);
    for (int64_t i = 0; i <= len; ++i) p[b * (len + 1) + i] = tokens[static_cast<size_t>(o + i)];
  }
  return out;
}

}  // namespace seqmix::data
