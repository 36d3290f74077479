#pragma once
/// @file progress.h
/// Progress reporting on stderr: on a terminal a bar redrawn in place that always fits the
/// terminal's width (so it never wraps into scrolled copies), with the rate and the remaining
/// time; plain lines (one per `update` call the caller chooses to make, no carriage returns
/// or escape codes) when stderr is not a TTY.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace seqmix::util {

/// Where and how a Progress writes. The defaults describe stderr as it is; tests inject a
/// file, TTY-ness and a width.
struct ProgressOptions {
  std::FILE* out = stderr;
  int tty = -1;    ///< 1: redraw a bar; 0: plain lines; -1: isatty(out)
  int width = 0;   ///< terminal columns; 0: `terminal_width(out)`, asked at every redraw
  std::string unit = "steps";  ///< what `done` counts, for the rate ("12.5 steps/s")
  /// Plain-line mode only: at most one line per this many seconds (the first after this
  /// long); 0 prints a line for every `update`.
  double plain_interval_s = 0;
};

class Progress {
 public:
  /// @param total  steps at 100%.  @param start  steps already done (resumed runs); the
  /// rate counts only the steps done since construction.
  Progress(std::string label, int64_t total, int64_t start, ProgressOptions options = {});
  /// Reports `done` steps with a free-form status (e.g. "loss 1.23"). On a TTY redraws the
  /// bar at most ~10 times per second (always at done >= total), cut to the width; otherwise
  /// prints one line (see ProgressOptions::plain_interval_s).
  void update(int64_t done, const std::string& status);
  /// Prints a line above the bar (or a plain line).
  void message(const std::string& line);
  /// Ends the bar line (the bar stays on screen as last drawn).
  void finish();
  bool tty() const { return tty_; }
  /// The bar as it would be drawn now for `done` steps, without "\r" and escape codes: at
  /// most `width` - 1 columns (the last column is left free: writing into it makes some
  /// terminals wrap).
  std::string bar_line(int64_t done, const std::string& status, int width) const;

 private:
  std::string label_;
  int64_t total_, start_;
  ProgressOptions options_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point t0_, last_draw_;
  std::string last_;  ///< the bar last drawn, to redraw it under a message
};

/// The terminal's width in columns for `stream`: ioctl(TIOCGWINSZ) on it, else the
/// environment variable COLUMNS (a positive integer), else 80.
int terminal_width(std::FILE* stream);

/// "1h02m", "3m05s" or "12s"; "?" for a negative, non-finite or absurd (> 3 years) value.
std::string format_duration(double seconds);

/// A count in at most 5 characters: "9999", "12.3k", "4.6M", "250k", "7.9G".
std::string format_count(int64_t n);

/// `s` cut to at most `columns` terminal columns (counting UTF-8 characters, never splitting
/// one); control characters become spaces.
std::string fit_columns(const std::string& s, int columns);

}  // namespace seqmix::util
