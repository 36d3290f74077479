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

/// `\xNN` for one byte.
inline std::string byte_escape(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  return std::string("\\x") + hex[c >> 4] + hex[c & 15];
}

/// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates,
/// at most U+10FFFF) that starts at text[i], or 0 if none does.
inline size_t utf8_sequence_length(const std::string& text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  return n;
}

/// An error message as it may be shown on a terminal: names and text read from a user's
/// files (a crafted checkpoint's tensor names) may hold escape sequences, bytes that are not
/// UTF-8, or be megabytes long. Control bytes other than newline and tab, and every byte
/// outside a well-formed UTF-8 sequence, are written as `\xNN` (Python's exceptions take
/// UTF-8 text: one bad byte would otherwise empty the whole message), and a message over
/// 4 KiB keeps its first 3 KiB and last 512 bytes around a note of what was left out. Every
/// message the CLI prints and every exception the Python package raises goes through it.
inline std::string message_text(const std::string& text) {
  constexpr size_t kMost = 4096, kHead = 3072, kTail = 512;
  std::string out;
  out.reserve(std::min(text.size(), kMost) + 64);
  auto add = [&](const std::string& part) {
    for (size_t i = 0; i < part.size();) {
      const auto c = static_cast<unsigned char>(part[i]);
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        out += printable_text(std::string(1, part[i++]));
        continue;
      }
      const size_t n = utf8_sequence_length(part, i);
      if (n == 0) {
        out += byte_escape(c);
        ++i;
        continue;
      }
      out.append(part, i, n);
      i += n;
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
