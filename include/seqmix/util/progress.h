#pragma once
/// @file progress.h
/// Progress reporting on stderr: a redrawn bar with rate and ETA on a terminal, plain lines
/// (one per `update` call the caller chooses to make) when stderr is not a TTY.
#include <chrono>
#include <cstdint>
#include <string>

namespace seqmix::util {

class Progress {
 public:
  /// @param total  steps at 100%.  @param start  steps already done (resumed runs).
  Progress(std::string label, int64_t total, int64_t start);
  /// Reports `done` steps with a free-form status (e.g. "loss 1.23"). On a TTY redraws the
  /// bar at most ~10 times per second; otherwise prints one line.
  void update(int64_t done, const std::string& status);
  /// Prints a line above the bar (or a plain line).
  void message(const std::string& line);
  /// Ends the bar line.
  void finish();
  bool tty() const { return tty_; }

 private:
  std::string label_;
  int64_t total_, start_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point t0_, last_draw_;
  std::string last_;
};

/// "1h02m", "3m05s" or "12s".
std::string format_duration(double seconds);

}  // namespace seqmix::util
