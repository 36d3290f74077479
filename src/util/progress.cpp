#include "seqmix/util/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace seqmix::util {

namespace {

// Terminal columns taken by `s`: one per UTF-8 character (continuation bytes take none).
int columns(const std::string& s) {
  int n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string format_rate(double rate, const std::string& unit) {
  if (!(rate > 0) || !std::isfinite(rate)) return "- " + unit + "/s";
  if (rate < 10) return fmt::format("{:.2f} {}/s", rate, unit);
  if (rate < 1000) return fmt::format("{:.1f} {}/s", rate, unit);
  return format_count(static_cast<int64_t>(rate)) + " " + unit + "/s";
}

}  // namespace

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string format_count(int64_t n) {
  const double a = std::fabs(static_cast<double>(n));
  if (a < 1e4) return std::to_string(n);
  const char* suffix[] = {"k", "M", "G", "T", "P"};
  double v = static_cast<double>(n) / 1e3;
  int i = 0;
  while (std::fabs(v) >= 999.95 && i < 4) {
    v /= 1e3;
    ++i;
  }
  return fmt::format(std::fabs(v) < 99.95 ? "{:.1f}{}" : "{:.0f}{}", v, suffix[i]);
}

std::string fit_columns(const std::string& s, int max_columns) {
  std::string out;
  int n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const bool starts = (c & 0xC0) != 0x80;
    if (starts && n >= max_columns) break;
    n += starts;
    out += (c < 0x20 || c == 0x7F) ? ' ' : s[i];
  }
  return out;
}

int terminal_width(std::FILE* stream) {
  winsize ws{};
  if (stream && ioctl(fileno(stream), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v < 100000) return static_cast<int>(v);
  }
  return 80;
}

Progress::Progress(std::string label, int64_t total, int64_t start, ProgressOptions options)
    : label_(std::move(label)),
      total_(total),
      start_(start),
      options_(std::move(options)),
      tty_(options_.tty >= 0 ? options_.tty != 0
                             : (options_.out && isatty(fileno(options_.out)) != 0)),
      t0_(std::chrono::steady_clock::now()),
      last_draw_(options_.tty == 1 || options_.plain_interval_s <= 0
                     ? t0_ - std::chrono::seconds(1)
                     : t0_) {
  if (!options_.out) options_.out = stderr;
}

std::string Progress::bar_line(int64_t done, const std::string& status, int width) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done - start_) / elapsed : 0.0;
  const double frac = total_ > 0 ? std::clamp(static_cast<double>(done) /
                                                  static_cast<double>(total_), 0.0, 1.0)
                                 : 1.0;
  const std::string when =
      done >= total_ ? "in " + format_duration(elapsed)
                     : "ETA " + format_duration(rate > 0 ? static_cast<double>(total_ - done) / rate
                                                         : -1.0);
  const std::string core =
      fmt::format("{}/{} {:.0f}% {} {}", format_count(done), format_count(total_), 100.0 * frac,
                  format_rate(rate, options_.unit), when);
  const int avail = std::max(1, width - 1);
  // The bar takes what is left after the label, the figures and up to 24 columns of the
  // status; the status gets the rest, cut at the edge.
  const int status_cols = status.empty() ? 0 : 3 + std::min(24, columns(status));
  const int bar = std::min(30, avail - columns(label_) - 1 - columns(core) - status_cols - 3);
  std::string line = label_ + " ";
  if (bar >= 8) {
    const int filled = static_cast<int>(frac * bar);
    line += "[" + std::string(static_cast<size_t>(filled), '#') +
            std::string(static_cast<size_t>(bar - filled), '.') + "] ";
  }
  line += core;
  if (!status.empty()) line += " | " + status;
  return fit_columns(line, avail);
}

void Progress::update(int64_t done, const std::string& status) {
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = options_.width > 0 ? options_.width : terminal_width(options_.out);
    last_ = bar_line(done, status, width);
    std::fprintf(options_.out, "\r%s\033[K", last_.c_str());
    drawn_ = true;
  } else {
    if (options_.plain_interval_s > 0 &&
        std::chrono::duration<double>(now - last_draw_).count() < options_.plain_interval_s)
      return;
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    const double rate = elapsed > 0 ? static_cast<double>(done - start_) / elapsed : 0.0;
    const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    std::string line = fmt::format(
        "{} {}/{} ({:.1f}%) | {} | {} | {}", label_, done, total_, 100.0 * frac, status,
        format_rate(rate, options_.unit),
        done >= total_ ? "in " + format_duration(elapsed)
                       : "ETA " + format_duration(rate > 0 ? static_cast<double>(total_ - done) /
                                                                 rate
                                                           : -1.0));
    // A status with a line break or a carriage return would break the one-line format.
    std::replace_if(line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    std::fprintf(options_.out, "%s\n", line.c_str());
  }
  std::fflush(options_.out);
}

void Progress::message(const std::string& line) {
  if (tty_ && drawn_) {
    // The bar again below the line, cut again in case the terminal has narrowed since.
    const int width = options_.width > 0 ? options_.width : terminal_width(options_.out);
    last_ = fit_columns(last_, std::max(1, width - 1));
    std::fprintf(options_.out, "\r\033[K%s\n%s", line.c_str(), last_.c_str());
  } else {
    std::fprintf(options_.out, "%s\n", line.c_str());
  }
  std::fflush(options_.out);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fputs("\n", options_.out);
  drawn_ = false;
  std::fflush(options_.out);
}

}  // namespace seqmix::util
