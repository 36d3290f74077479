#include "seqmix/data/listops.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace seqmix::data {

namespace {

using namespace listops;

// Draws one tree into `out` (prefix order) and returns its value, or -1 once the sequence
// reaches `limit` tokens: such a tree would be rejected anyway, so it is not finished.
class TreeDrawer {
 public:
  TreeDrawer(const ListOpsOptions& o, std::mt19937_64& rng) : o_(o), rng_(rng) {}

  int32_t draw(int32_t depth, std::vector<int32_t>& out) {
    if (static_cast<int64_t>(out.size()) >= o_.max_length) return -1;
    const double r = depth < o_.max_depth ? unit_(rng_) : 1.0;
    if (r > 0.25) {
      const int32_t v = digit_(rng_);
      out.push_back(kDigit0 + v);
      return v;
    }
    const size_t op_at = out.size();
    out.push_back(kPad);  // the operator, drawn after its arguments as LRA does
    const int32_t n = std::uniform_int_distribution<int32_t>(2, o_.max_args)(rng_);
    std::vector<int32_t> args;
    args.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      const int32_t v = draw(depth + 1, out);
      if (v < 0) return -1;
      args.push_back(v);
    }
    const int32_t op = kMin + std::uniform_int_distribution<int32_t>(0, 3)(rng_);
    out[op_at] = op;
    out.push_back(kEnd);
    return apply(op, args);
  }

 private:
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
  std::mt19937_64& rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  std::uniform_int_distribution<int32_t> digit_{0, 9};
};

struct TokensHash {
  size_t operator()(const std::vector<int32_t>& t) const {
    size_t h = 1469598103934665603ull;
    for (int32_t x : t) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

}  // namespace

ListOpsData generate_listops(const ListOpsOptions& o) {
  auto bad = [](const std::string& key, const std::string& what) {
    throw std::invalid_argument("listops." + key + ": " + what);
  };
  if (o.train < 0 || o.valid < 0 || o.test < 0) bad("train/valid/test", "sizes must be >= 0");
  if (o.max_args < 2) bad("max_args", "must be >= 2");
  if (o.max_depth < 1) bad("max_depth", "must be >= 1");
  if (o.min_length < 0 || o.min_length + 1 >= o.max_length)
    bad("min_length", "need 0 <= min_length < max_length - 1 (both bounds are exclusive)");
  std::mt19937_64 rng(o.seed);
  TreeDrawer drawer(o, rng);
  std::unordered_set<std::vector<int32_t>, TokensHash> seen;
  ListOpsData d;
  const int64_t total = o.train + o.valid + o.test;
  std::vector<int32_t> tokens;
  while (static_cast<int64_t>(seen.size()) < total) {
    tokens.clear();
    const int32_t value = drawer.draw(1, tokens);
    const auto n = static_cast<int64_t>(tokens.size());
    if (value < 0 || n <= o.min_length || n >= o.max_length) continue;
    if (!seen.insert(tokens).second) continue;
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
