#include "seqmix/data/listops.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "seqmix/util/rng.h"

namespace seqmix::data {

namespace {

using namespace listops;

// Draws trees in prefix order with an explicit stack of open operators (no recursion, so any
// depth costs heap, not call stack). The random numbers are drawn in the order of LRA's
// recursive generator: at each node the operator-or-digit draw, then a digit, or the
// argument count, the arguments, and the operator last. util::Rng, not <random>'s
// distributions, so that a seed gives the same trees with every standard library.
class TreeDrawer {
 public:
  TreeDrawer(const ListOpsOptions& o, util::Rng& rng) : o_(o), rng_(rng) {}

  /// Draws one tree into `out` (cleared first) and returns its value, or -1 once the
  /// sequence reaches max_length tokens: such a tree would be rejected anyway, so it is not
  /// finished.
  int32_t draw(std::vector<int32_t>& out) {
    out.clear();
    open_ = 0;
    int32_t depth = 1;  // of the node drawn next
    for (;;) {
      if (static_cast<int64_t>(out.size()) >= o_.max_length) return -1;
      // No draw at max_depth, as LRA's generator makes no choice there.
      const bool operator_node = depth < o_.max_depth && rng_.bernoulli(0.25);
      int32_t value;
      if (!operator_node) {
        value = static_cast<int32_t>(rng_.uniform_int(0, 9));
        out.push_back(kDigit0 + value);
      } else {
        Frame& f = push();
        f.op_at = out.size();
        out.push_back(kPad);  // the operator, drawn after its arguments as LRA does
        f.arity = static_cast<int32_t>(rng_.uniform_int(2, o_.max_args));
        f.depth = depth;
        ++depth;
        continue;
      }
      // Hand the value up, closing every operator whose last argument it completes.
      for (;;) {
        if (open_ == 0) return value;
        Frame& f = frames_[open_ - 1];
        f.args.push_back(value);
        if (static_cast<int32_t>(f.args.size()) < f.arity) {
          depth = f.depth + 1;
          break;
        }
        const int32_t op = kMin + static_cast<int32_t>(rng_.uniform_int(0, 3));
        out[f.op_at] = op;
        out.push_back(kEnd);
        value = apply(op, f.args);
        --open_;
      }
    }
  }

 private:
  struct Frame {
    size_t op_at = 0;
    int32_t arity = 0, depth = 0;
    std::vector<int32_t> args;
  };

  // The next frame, reusing the storage of earlier trees.
  Frame& push() {
    if (open_ == frames_.size()) frames_.emplace_back();
    Frame& f = frames_[open_++];
    f.args.clear();
    return f;
  }

  static int32_t apply(int32_t op, std::vector<int32_t>& a) {
    switch (op) {
      case kMin:
        return *std::min_element(a.begin(), a.end());
      case kMax:
        return *std::max_element(a.begin(), a.end());
      case kMed: {  // int(numpy.median): the mean of the middle two, rounded down
        std::sort(a.begin(), a.end());
        const size_t n = a.size();
        return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
      }
      default: {
        int32_t s = 0;
        for (int32_t v : a) s += v;
        return s % 10;
      }
    }
  }

  const ListOpsOptions& o_;
  util::Rng& rng_;
  std::vector<Frame> frames_;  // frames_[0, open_) are the open operators, outermost first
  size_t open_ = 0;
};

struct TokensHash {
  size_t operator()(const std::vector<int32_t>& t) const {
    size_t h = 1469598103934665603ull;
    for (int32_t x : t) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("listops: " + what); }

}  // namespace

int64_t listops_max_tokens(int32_t max_depth, int32_t max_args, int64_t cap) {
  // The longest tree: every node above max_depth an operator with max_args arguments.
  // Built from the leaves up; t(depth) = 2 + max_args * t(depth + 1), t(max_depth) = 1.
  int64_t t = 1;
  for (int32_t d = max_depth - 1; d >= 1 && t < cap; --d)
    t = t >= (cap - 2) / max_args ? cap : 2 + static_cast<int64_t>(max_args) * t;
  return std::min(t, cap);
}

void validate(const ListOpsOptions& o) {
  using std::to_string;
  auto count = [](const char* name, const char* flag, int64_t v) {
    if (v < 0 || v > ListOpsOptions::kMaxSequences)
      bad(std::string(name) + " (" + flag + ") must be in [0, " +
          to_string(ListOpsOptions::kMaxSequences) + "] sequences, got " + to_string(v));
  };
  count("train", "`train`", o.train);
  count("valid", "`valid`", o.valid);
  count("test", "`test`", o.test);
  if (o.train + o.valid + o.test == 0)
    bad("train + valid + test (`train`, `valid`, `test`) is 0: nothing to generate");
  if (o.seed < 0) bad("`seed` must be >= 0, got " + to_string(o.seed));
  if (o.max_depth < 1 || o.max_depth > ListOpsOptions::kMaxDepth)
    bad("`max_depth` must be in [1, " + to_string(ListOpsOptions::kMaxDepth) +
        "], got " + to_string(o.max_depth));
  if (o.max_args < 2 || o.max_args > ListOpsOptions::kMaxArgs)
    bad("`max_args` must be in [2, " + to_string(ListOpsOptions::kMaxArgs) +
        "], got " + to_string(o.max_args));
  if (o.max_length < 3 || o.max_length > ListOpsOptions::kMaxLength)
    bad("`max_length` must be in [3, " + to_string(ListOpsOptions::kMaxLength) +
        "] tokens, got " + to_string(o.max_length));
  if (o.min_length < 0 || o.min_length + 1 >= o.max_length)
    bad("`min_length` must be in [0, max_length - 2] = [0, " +
        to_string(o.max_length - 2) + "] (both bounds are exclusive), got " +
        to_string(o.min_length));
  // Each count and the length are bounded above, so the product cannot overflow.
  const int64_t total = o.train + o.valid + o.test;
  if (total * (o.max_length - 1) > ListOpsOptions::kMaxTotalTokens)
    bad("train + valid + test = " + to_string(total) + " sequences of up to max_length - 1 = " +
        to_string(o.max_length - 1) + " tokens may hold " + to_string(total * (o.max_length - 1)) +
        " tokens, more than the limit of " + to_string(ListOpsOptions::kMaxTotalTokens) +
        "; lower `train`/`valid`/`test` or `max_length`");
  const int64_t longest = listops_max_tokens(o.max_depth, o.max_args, o.max_length);
  if (longest <= o.min_length + 1)
    bad("no tree is longer than `min_length` " + to_string(o.min_length) +
        ": with `max_depth` " + to_string(o.max_depth) + " and `max_args` " +
        to_string(o.max_args) + " the longest has " + to_string(longest) +
        " tokens; raise `max_depth` or `max_args`, or lower `min_length`");
}

ListOpsData generate_listops(const ListOpsOptions& o) {
  validate(o);
  util::Rng rng(static_cast<uint64_t>(o.seed));
  TreeDrawer drawer(o, rng);
  std::unordered_set<std::vector<int32_t>, TokensHash> seen;
  ListOpsData d;
  const int64_t total = o.train + o.valid + o.test;
  std::vector<int32_t> tokens;
  // A length range that few trees reach, or fewer distinct trees than requested (small
  // depth and arity), would otherwise loop for ever, and trees that grow past max_length in
  // most draws cost up to max_length tokens each: stop after kMaxFailedDraws draws or
  // kMaxFailedTokens tokens in a row (more if the trees so far needed more) that add no tree.
  // The counts only decide when to stop: the trees drawn are the same as without them.
  int64_t failed = 0, short_draws = 0, long_draws = 0, failed_tokens = 0, drawn_tokens = 0;
  while (static_cast<int64_t>(seen.size()) < total) {
    const auto kept = static_cast<int64_t>(seen.size());
    const int64_t token_limit =
        std::max(ListOpsOptions::kMaxFailedTokens,
                 kept == 0 ? 0 : ListOpsOptions::kFailedTokensPerTree * (drawn_tokens / kept));
    if (failed >= ListOpsOptions::kMaxFailedDraws || failed_tokens >= token_limit)
      bad(std::to_string(failed) + " draws in a row gave no new tree with min_length < tokens < "
          "max_length (`min_length` " + std::to_string(o.min_length) + ", `max_length` " +
          std::to_string(o.max_length) + ", `max_depth` " + std::to_string(o.max_depth) +
          ", `max_args` " + std::to_string(o.max_args) + ") after " + std::to_string(kept) +
          " of " + std::to_string(total) + " (" + std::to_string(failed_tokens) +
          " tokens; " + std::to_string(short_draws) + " draws too short, " +
          std::to_string(long_draws) + " too long, " +
          std::to_string(failed - short_draws - long_draws) +
          " repeats); widen the length range, change `max_depth`/`max_args` (trees grow "
          "like ((max_args + 2) / 8)^depth) or ask for fewer sequences");
    ++failed;
    const int32_t value = drawer.draw(tokens);
    const auto n = static_cast<int64_t>(tokens.size());
    failed_tokens += n;
    if (value < 0 || n >= o.max_length) {
      ++long_draws;
      continue;
    }
    if (n <= o.min_length) {
      ++short_draws;
      continue;
    }
    if (!seen.insert(tokens).second) continue;
    drawn_tokens += failed_tokens;
    failed = short_draws = long_draws = failed_tokens = 0;
    const auto k = static_cast<int64_t>(seen.size());
    auto& split = k <= o.train ? d.train : k <= o.train + o.valid ? d.valid : d.test;
    split.push_back({tokens, value, {}});
  }
  return d;
}

std::string listops_to_string(const std::vector<int32_t>& tokens) {
  static const char* names[] = {"<pad>", "0", "1", "2", "3", "4", "5", "6", "7",
                                "8",     "9", "[MIN", "[MAX", "[MED", "[SM", "]"};
  std::string s;
  for (int32_t t : tokens) {
    if (t < 0 || t >= kVocabSize)
      throw std::invalid_argument("listops: token " + std::to_string(t) + " is outside 0.." +
                                  std::to_string(kVocabSize - 1));
    if (!s.empty()) s += ' ';
    s += names[t];
  }
  return s;
}

}  // namespace seqmix::data
