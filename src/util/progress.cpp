#include "seqmix/util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace seqmix::util {

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(std::string label, int64_t total, int64_t start)
    : label_(std::move(label)),
      total_(total),
      start_(start),
      tty_(isatty(fileno(stderr)) != 0),
      t0_(std::chrono::steady_clock::now()),
      last_draw_(t0_ - std::chrono::seconds(1)) {}

void Progress::update(int64_t done, const std::string& status) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - t0_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done - start_) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : -1.0;
  const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(frac * kWidth);
    last_ = fmt::format("\r{} [{}{}] {}/{} {:5.1f}% | {} | {:.2f} it/s | ETA {}\033[K", label_,
                        std::string(static_cast<size_t>(filled), '#'),
                        std::string(static_cast<size_t>(kWidth - filled), '.'), done, total_,
                        100.0 * frac, status, rate, format_duration(eta));
    std::fputs(last_.c_str(), stderr);
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s %lld/%lld (%.1f%%) | %s | %.2f it/s | ETA %s\n", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), 100.0 * frac,
                 status.c_str(), rate, format_duration(eta).c_str());
  }
  std::fflush(stderr);
}

void Progress::message(const std::string& line) {
  if (tty_ && drawn_) {
    std::fprintf(stderr, "\r\033[K%s\n%s", line.c_str(), last_.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
  std::fflush(stderr);
}

}  // namespace seqmix::util
