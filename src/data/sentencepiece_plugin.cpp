// SentencePiece behind a C interface, built as its own shared object and loaded by
// data/tokenizer.cpp with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why: Debian's libsentencepiece.so carries its own copy of protobuf-lite and exports it.
// Linked into a program that also loads LibTorch's libprotobuf.so.32, the two copies
// interpose on each other and the program crashes before main() (protobuf's static
// initialisers call into SentencePiece's copy). Loaded locally with deep binding,
// SentencePiece sees only its own protobuf and LibTorch only the system one.
//
// Deep binding has one catch: SentencePiece's own std::cerr binds to libstdc++'s copy, which
// is never constructed when the executable holds a copy relocation of std::cerr (any program
// that itself uses std::cerr/std::cout), so its log output would crash. Its logging is
// therefore switched off; every failure still comes back as a Status message.
//
// Every function returns 0 on success; on failure non-zero and *err = a malloc'ed message.
// Buffers handed out are malloc'ed; the caller frees them with seqmix_spm_free.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace sentencepiece::logging {
void SetMinLogLevel(int v);  // exported by libsentencepiece.so; not in its public headers
}

namespace {

// Above LOG_FATAL (3): nothing is written to std::cerr (see the file comment).
const bool kQuiet = (sentencepiece::logging::SetMinLogLevel(4), true);

char* copy_out(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) {
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
  }
  return p;
}

int fail(char** err, const std::string& message) {
  if (err) *err = copy_out(message);
  return 1;
}

// Feeds the trainer the non-empty lines of a text without copying them all.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  LineIterator(const char* text, size_t n) : text_(text), n_(n) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (pos_ < n_) {
      const void* nl = std::memchr(text_ + pos_, '\n', n_ - pos_);
      const size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - text_) : n_;
      line_.assign(text_ + pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const char* text_;
  size_t n_, pos_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void seqmix_spm_free(void* p) { std::free(p); }

__attribute__((visibility("default"))) int seqmix_spm_load(const char* proto, size_t n,
                                                           void** model, char** err) {
  try {
    // Owned until handed out: the loader can also throw (a leak found by fuzz/fuzz_tokenizer).
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->LoadFromSerializedProto(std::string(proto, n));
    if (!status.ok() || sp->GetPieceSize() <= 0)
      return fail(err, status.ok() ? "the model holds no pieces" : status.ToString());
    *model = sp.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

__attribute__((visibility("default"))) void seqmix_spm_unload(void* model) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

__attribute__((visibility("default"))) int seqmix_spm_size(void* model) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(model)->GetPieceSize();
}

__attribute__((visibility("default"))) int seqmix_spm_encode(void* model, const char* text,
                                                             size_t n, int32_t** ids,
                                                             size_t* n_ids, char** err) {
  try {
    const auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(model);
    // SentencePiece writes spaces as U+2581 internally and decodes every U+2581 back to a
    // space, so a U+2581 in the text itself would come back as a space (found by
    // fuzz/fuzz_bpe_corpus). With byte pieces in the model it is encoded as its three UTF-8
    // bytes instead, which decode to exactly those bytes; the text between occurrences is
    // encoded as usual.
    static const std::string kMeta = "\xe2\x96\x81";
    std::vector<int> meta_bytes;
    for (const char* piece : {"<0xE2>", "<0x96>", "<0x81>"}) {
      const int id = sp->PieceToId(piece);
      if (id >= 0 && sp->IsByte(id)) meta_bytes.push_back(id);
    }
    const std::string all(text, n);
    std::vector<int> out, part;
    size_t pos = 0;
    while (true) {
      const size_t hit = meta_bytes.size() == 3 ? all.find(kMeta, pos) : std::string::npos;
      const size_t end = hit == std::string::npos ? all.size() : hit;
      if (end > pos) {
        const auto status = sp->Encode(all.substr(pos, end - pos), &part);
        if (!status.ok()) return fail(err, status.ToString());
        out.insert(out.end(), part.begin(), part.end());
      }
      if (hit == std::string::npos) break;
      out.insert(out.end(), meta_bytes.begin(), meta_bytes.end());
      pos = hit + kMeta.size();
    }
    *ids = static_cast<int32_t*>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(int32_t)));
    if (!*ids) return fail(err, "out of memory");
    for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
    *n_ids = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

__attribute__((visibility("default"))) int seqmix_spm_decode(void* model, const int32_t* ids,
                                                             size_t n, char** text,
                                                             size_t* n_text, char** err) {
  try {
    std::string out;
    const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(model)->Decode(
        std::vector<int>(ids, ids + n), &out);
    if (!status.ok()) return fail(err, status.ToString());
    *text = copy_out(out);
    if (!*text) return fail(err, "out of memory");
    *n_text = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

// Trains on the non-empty lines of `text`; args are SentencePiece TrainerSpec flags.
__attribute__((visibility("default"))) int seqmix_spm_train(const char* text, size_t n,
                                                            const char* const* keys,
                                                            const char* const* values,
                                                            size_t n_args, char** proto,
                                                            size_t* n_proto, char** err) {
  try {
    std::unordered_map<std::string, std::string> args;
    for (size_t i = 0; i < n_args; ++i) args[keys[i]] = values[i];
    args["minloglevel"] = "4";  // the trainer resets the level from this flag
    // Not a TrainerSpec field: the trainer's line sampling uses a global generator.
    if (const auto it = args.find("random_seed"); it != args.end()) {
      sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(std::stoul(it->second)));
      args.erase(it);
    }
    LineIterator lines(text, n);
    std::string out;
    const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &out);
    if (!status.ok()) return fail(err, status.ToString());
    *proto = static_cast<char*>(std::malloc(std::max<size_t>(1, out.size())));
    if (!*proto) return fail(err, "out of memory");
    std::memcpy(*proto, out.data(), out.size());
    *n_proto = out.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

}  // extern "C"
