#pragma once
/// @file fields.h
/// Configuration fields declared once. A configuration struct lists each of its fields a
/// single time (name, C++ member, documentation, check, command-line flag); everything else
/// (TOML reading and writing, `--set section.key=value`, `--dump-config`, validation and the
/// key names in error messages) is generic code over those lists (train/configuration/config.cpp).
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
#include <utility>
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

/// One field of configuration struct S: a member of S (the common case) or a value reached
/// through S's accessors (a layer's options, whose members are private, see
/// models/model_config.h's option_field).
template <class S>
struct Field {
  /// What is wrong with the field's value in `s`, as "must be ..., got ..." (empty: fine).
  using Check = std::function<std::string(const S& s)>;
  /// Reads the field from `s`.
  using Get = std::function<FieldValue(const S& s)>;
  /// Stores `v`, which holds the field's type. May throw std::invalid_argument saying what it
  /// expects when the field cannot hold the value (a name an enumeration does not have).
  using Put = std::function<void(S& s, const FieldValue& v)>;

  const char* name;  ///< the key inside its section, e.g. "weights" in [model.aib]
  const char* doc;   ///< one line, for --help texts and docs
  Check check = {};
  /// Added after the first release: a stored configuration without the key gets the
  /// default, which is the behaviour it had before the key existed.
  bool optional = false;
  const char* flag = nullptr;  ///< its command-line flag, e.g. "--lr" (nullptr: none)

  /// A member of S of a FieldValue type.
  template <class T>
  Field(const char* name, T S::*member, const char* doc, Check check = {}, bool optional = false,
        const char* flag = nullptr)
      : name(name),
        doc(doc),
        check(std::move(check)),
        optional(optional),
        flag(flag),
        get_([member](const S& s) { return FieldValue(s.*member); }),
        put_([member](S& s, const FieldValue& v) { s.*member = std::get<T>(v); }),
        type_(T()) {}
  /// A value of type `type`'s alternative, read with `get` and stored with `put`.
  Field(const char* name, FieldValue type, Get get, Put put, const char* doc, Check check = {},
        const char* flag = nullptr)
      : name(name),
        doc(doc),
        check(std::move(check)),
        flag(flag),
        get_(std::move(get)),
        put_(std::move(put)),
        type_(std::move(type)) {}

  FieldValue get(const S& s) const { return get_(s); }
  /// Stores `v`; false (and `s` unchanged) when `v` holds another type than the field.
  /// @throws std::invalid_argument when the field cannot hold the value (see Put).
  bool set(S& s, const FieldValue& v) const {
    if (v.index() != type_.index()) return false;
    put_(s, v);
    return true;
  }
  /// The type this field holds (a default value of it).
  FieldValue type() const { return type_; }

 private:
  Get get_;
  Put put_;
  FieldValue type_;
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

/// As finite_above, for a value the optimizer applies to float32 tensors: at most float's
/// largest (3.4e38: beyond, it overflows to inf in the first step), and where the bound is
/// open, at least float's smallest normal number (1.2e-38: below, it rounds towards 0).
template <class S>
typename Field<S>::Check float32_above(double S::*m, double lo, bool open, std::string note = "") {
  return [=](const S& s) {
    const double v = s.*m;
    const std::string base = finite_above<S>(m, lo, open, note)(s);
    if (!base.empty()) return base;
    constexpr double kMax = 3.4028234663852886e38, kMin = 1.1754943508222875e-38;
    if (v > kMax)
      return "must be at most " + format_number(kMax) + " (float32's largest)" + note +
             ", got " + format_number(v);
    if (open && v < kMin)
      return "must be at least " + format_number(kMin) + " (float32's smallest normal number)" +
             note + ", got " + format_number(v);
    return std::string();
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
