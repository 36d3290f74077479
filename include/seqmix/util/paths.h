#pragma once
/// @file paths.h
/// Showing user text (paths, names) in one-line messages. Paths with control characters are
/// refused by check_path_text (run_folder.h); text that is shown before or without that check
/// goes through printable_text.
#include <algorithm>
#include <string>

namespace seqmix::util {

/// `text` with every control byte (< 0x20, 0x7f) written as `\xNN`, so that it prints on one
/// line and shows what was there.
inline std::string printable_text(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

/// An error message as it may be shown on a terminal: names and text read from a user's
/// files (a crafted checkpoint's tensor names) may hold escape sequences or be megabytes
/// long. Control bytes other than newline and tab are written as `\xNN`, and a message over
/// 4 KiB keeps its first 3 KiB and last 512 bytes around a note of what was left out. Every
/// message the CLI prints and every exception the Python package raises goes through it.
inline std::string message_text(const std::string& text) {
  constexpr size_t kMost = 4096, kHead = 3072, kTail = 512;
  std::string out;
  out.reserve(std::min(text.size(), kMost) + 64);
  auto add = [&](const std::string& part) {
    for (const char ch : part) {
      const auto c = static_cast<unsigned char>(ch);
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
        out += printable_text(std::string(1, ch));
      else
        out += ch;
    }
  };
  if (text.size() <= kMost) {
    add(text);
  } else {
    add(text.substr(0, kHead));
    out += " [... " + std::to_string(text.size() - kHead - kTail) + " bytes left out ...] ";
    add(text.substr(text.size() - kTail));
  }
  return out;
}

}  // namespace seqmix::util
