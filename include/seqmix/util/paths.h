#pragma once
/// @file paths.h
/// Showing user text (paths, names) in one-line messages. Paths with control characters are
/// refused by check_path_text (run_folder.h); text that is shown before or without that check
/// goes through printable_text.
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

}  // namespace seqmix::util
