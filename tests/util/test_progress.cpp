// Progress bar (include/seqmix/util/progress.h): on a terminal every redraw fits the width
// (no wrapping into scrolled copies), shows the rate and the remaining time; without a
// terminal, plain lines with no carriage return or escape code. Evaluation reports its
// progress (include/seqmix/train/evaluate.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "seqmix/models/presets.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/util/progress.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using seqmix::util::Progress;
using seqmix::util::ProgressOptions;

// Everything written to `f` so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

// Columns of a terminal line: UTF-8 characters, without the erase-to-end escape "\033[K".
int columns(std::string s) {
  for (size_t at; (at = s.find("\033[K")) != std::string::npos;) s.erase(at, 3);
  int n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The pieces of terminal output between carriage returns and line feeds.
std::vector<std::string> segments(const std::string& out) {
  std::vector<std::string> parts;
  std::string cur;
  for (const char c : out) {
    if (c == '\r' || c == '\n') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

const std::string kLongStatus =
    "loss 1.2345 lr 3.00e-04 and a long tail of status text that no 80-column terminal holds "
    "whole, with a UTF-8 character (\xC3\xA9) at the end \xC3\xA9\xC3\xA9\xC3\xA9";

TEST(Progress, EveryRedrawFitsTheTerminalWidth) {
  for (int width : {10, 20, 40, 60, 80, 132}) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    ProgressOptions o;
    o.out = f;
    o.tty = 1;
    o.width = width;
    Progress p("train", 1000, 0, o);
    p.update(1, kLongStatus);
    p.message("short");
    p.update(1000, kLongStatus);  // always drawn: done == total
    p.finish();
    const std::string out = contents(f);
    std::fclose(f);
    int bars = 0;
    for (const std::string& s : segments(out)) {
      EXPECT_LE(columns(s), width - 1) << "width " << width << ": '" << s << "'";
      bars += s.rfind("train", 0) == 0;
    }
    EXPECT_GE(bars, 2) << out;
    // The bar is redrawn in place: carriage returns, and exactly two line feeds (the message
    // and finish), so a narrow terminal never scrolls copies of it.
    EXPECT_NE(out.find('\r'), std::string::npos);
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
  }
}

TEST(Progress, ShowsRateAndRemainingTime) {
  ProgressOptions o;
  o.unit = "tokens";
  Progress p("eval", 400, 100, o);
  const std::string mid = p.bar_line(200, "x", 120);
  EXPECT_NE(mid.find("tokens/s"), std::string::npos) << mid;
  EXPECT_NE(mid.find("ETA "), std::string::npos) << mid;
  EXPECT_NE(mid.find("200/400 50%"), std::string::npos) << mid;
  EXPECT_NE(mid.find("[###"), std::string::npos) << "room for a bar: " << mid;
  const std::string end = p.bar_line(400, "x", 120);
  EXPECT_NE(end.find(" in "), std::string::npos) << end;
  EXPECT_EQ(end.find("ETA"), std::string::npos) << end;
  // Narrow: the bar goes first, the figures stay.
  const std::string narrow = p.bar_line(200, "x", 40);
  EXPECT_EQ(narrow.find('['), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("200/400"), std::string::npos) << narrow;
  EXPECT_LE(columns(narrow), 39);
}

TEST(Progress, PlainLinesWithoutATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressOptions o;
  o.out = f;
  o.tty = 0;
  o.width = 20;  // ignored: plain lines are not cut
  Progress p("train", 3, 0, o);
  EXPECT_FALSE(p.tty());
  p.update(1, "loss 2.0\nsecond line\rreturn");
  p.update(2, "loss 1.5");
  p.message("a message");
  p.update(3, "loss 1.0");
  p.finish();
  const std::string out = contents(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.find('\033'), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  EXPECT_NE(out.find("train 1/3 (33.3%) | loss 2.0 second line return | "), std::string::npos)
      << out;
  EXPECT_NE(out.find("steps/s | ETA "), std::string::npos) << out;
  EXPECT_NE(out.find("train 3/3 (100.0%) | loss 1.0 | "), std::string::npos) << out;
}

TEST(Progress, PlainLinesAtMostEveryInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressOptions o;
  o.out = f;
  o.tty = 0;
  o.plain_interval_s = 1000;
  Progress p("eval", 10, 0, o);
  for (int i = 1; i <= 10; ++i) p.update(i, "");
  p.finish();
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(Progress, TerminalWidthFromColumnsThen80) {
  std::FILE* f = std::tmpfile();  // not a terminal: no TIOCGWINSZ
  ASSERT_NE(f, nullptr);
  const char* saved = std::getenv("COLUMNS");
  const std::string keep = saved ? saved : "";
  setenv("COLUMNS", "57", 1);
  EXPECT_EQ(seqmix::util::terminal_width(f), 57);
  setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(seqmix::util::terminal_width(f), 80);
  setenv("COLUMNS", "-4", 1);
  EXPECT_EQ(seqmix::util::terminal_width(f), 80);
  unsetenv("COLUMNS");
  EXPECT_EQ(seqmix::util::terminal_width(f), 80);
  if (saved) setenv("COLUMNS", keep.c_str(), 1);
  std::fclose(f);
}

TEST(Progress, Formatting) {
  using seqmix::util::fit_columns;
  using seqmix::util::format_count;
  using seqmix::util::format_duration;
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(9999), "9999");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_count(4560000), "4.6M");
  EXPECT_EQ(format_count(999999), "1.0M");
  EXPECT_EQ(format_count(250000), "250k");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(fit_columns("abcdef", 3), "abc");
  EXPECT_EQ(fit_columns("\xC3\xA9\xC3\xA9\xC3\xA9", 2), "\xC3\xA9\xC3\xA9");  // never half of é
  EXPECT_EQ(fit_columns("a\tb\nc", 10), "a b c");
}

TEST(Progress, EvaluationReportsItsProgress) {
  auto cfg = seqmix::models::make_model_config("weird-net", "tiny");
  cfg.max_len = 16;
  torch::manual_seed(0);
  seqmix::models::SequenceModel m(cfg);
  seqmix::data::TokenIds tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 50);
  std::vector<std::pair<int64_t, int64_t>> calls;
  const auto r = seqmix::train::evaluate(
      m, tokens, seqmix::data::Tokenizer::bytes(), 2, 0,
      [&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
  // 99 predictions: 6 windows of 16 in batches of 2, then one of 3.
  EXPECT_EQ(seqmix::train::evaluated_tokens(tokens, 0), 99);
  EXPECT_EQ(seqmix::train::evaluated_tokens(tokens, 40), 40);
  EXPECT_EQ(r.tokens, 99);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{32}, int64_t{99}));
  EXPECT_EQ(calls.back(), std::make_pair(int64_t{99}, int64_t{99}));
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
}

// Training as a user runs it: through a pipe (plain lines), and on a 40-column terminal (a
// pseudo-terminal from script(1)), where every redraw of the bar fits 39 columns.
}  // namespace
