#pragma once
/// @file fields.h
/// Configuration fields declared once. A configuration struct lists each of its fields a
/// single time (name, C++ member, documentation, check, command-line flag); everything else
/// (TOML reading and writing, `--set section.key=value`, `--dump-config`, validation and the
/// key names in error messages) is generic code over those lists (train/config.cpp).
///
/// Example:
///   struct Opts { int64_t width = 4; };
///   const std::vector<util::Field<Opts>> opts_fields = {
///       {"width", &Opts::width, "units per layer", util::at_least<Opts>(&Opts::width, 1)}};
///   Opts o;
///   opts_fields[0].set(o, util::FieldValue(int64_t{8}));  // o.width == 8
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace seqmix::util {

/// The value types a configuration field can hold.
using FieldValue = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

/// How messages name a value type: "an integer", "a number", "true or false", "a string",
/// "an array of strings".
inline std::string field_type_name(const FieldValue& v) {
  static const char* const names[] = {"an integer", "a number", "true or false", "a string",
                                      "an array of strings"};
  return names[v.index()];
}

/// A number as TOML and fmt print it: nan (never "-nan"), inf, -inf, else the shortest form.
inline std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

/// One field of configuration struct S.
template <class S>
struct Field {
  using Member = std::variant<int64_t S::*, double S::*, bool S::*, std::string S::*,
                              std::vector<std::string> S::*>;
  /// What is wrong with the field's value in `s`, as "must be ..., got ..." (empty: fine).
  using Check = std::function<std::string(const S& s)>;

  const char* name;  ///< the key inside its section, e.g. "weights" in [model.aib]
  Member member;
  const char* doc;   ///< one line, for --help texts and docs
  Check check = {};
  /// Added after the first release: a stored configuration without the key gets the
  /// default, which is the behaviour it had before the key existed.
  bool optional = false;
  const char* flag = nullptr;  ///< its command-line flag, e.g. "--lr" (nullptr: none)

  FieldValue get(const S& s) const {
    return std::visit([&](auto m) -> FieldValue { return s.*m; }, member);
  }
  /// Stores `v`; false (and `s` unchanged) when `v` holds another type than the field.
  bool set(S& s, const FieldValue& v) const {
    return std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(s.*m)>;
          if (const T* x = std::get_if<T>(&v)) {
            s.*m = *x;
            return true;
          }
          return false;
        },
        member);
  }
  /// The type this field holds (a default value of it).
  FieldValue type() const {
    return std::visit([](auto m) -> FieldValue { return std::decay_t<decltype(S().*m)>(); },
                      member);
  }
};

/// Checks for the common cases. Each returns a Field::Check.
template <class S>
typename Field<S>::Check at_least(int64_t S::*m, int64_t lo, std::string note = "") {
  return [=](const S& s) {
    return s.*m >= lo ? std::string()
                      : "must be >= " + std::to_string(lo) + note + ", got " +
                            std::to_string(s.*m);
  };
}

/// lo <= v < hi (hi_open) or lo <= v <= hi, and finite (NaN fails every comparison).
template <class S>
typename Field<S>::Check in_range(double S::*m, double lo, double hi, bool hi_open,
                                  std::string note = "") {
  return [=](const S& s) {
    const double v = s.*m;
    if (std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi)) return std::string();
    return "must be a number in [" + format_number(lo) + ", " + format_number(hi) +
           (hi_open ? ")" : "]") + note + ", got " + format_number(v);
  };
}

/// v > lo (open) or v >= lo, and finite.
template <class S>
typename Field<S>::Check finite_above(double S::*m, double lo, bool open, std::string note = "") {
  return [=](const S& s) {
    const double v = s.*m;
    if (std::isfinite(v) && (open ? v > lo : v >= lo)) return std::string();
    return "must be a finite number " + std::string(open ? "> " : ">= ") + format_number(lo) +
           note + ", got " + format_number(v);
  };
}

/// The value is one of `choices` ("must be a, b or c, got 'x'").
template <class S>
typename Field<S>::Check one_of(std::string S::*m, std::vector<std::string> choices) {
  return [=](const S& s) {
    for (const auto& c : choices)
      if (s.*m == c) return std::string();
    std::string list;
    for (size_t i = 0; i < choices.size(); ++i)
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    return "must be " + list + ", got '" + s.*m + "'";
  };
}

/// The value parses with `parse` (which throws std::invalid_argument naming what it expects).
template <class S, class Parse>
typename Field<S>::Check parses(std::string S::*m, Parse parse) {
  return [=](const S& s) {
    try {
      parse(s.*m);
      return std::string();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  };
}

}  // namespace seqmix::util
