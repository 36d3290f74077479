#include "seqmix/models/catalog.h"

#include <fmt/format.h>

#include <type_traits>
#include <variant>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/models/presets.h"

namespace seqmix::models {

namespace {

// A parameter count in at most 7 characters: 0.12M, 17.5M, 205M, 61.0B.
std::string short_count(double n) {
  const double m = n / 1e6;
  if (m < 10) return fmt::format("{:.2f}M", m);
  if (m < 100) return fmt::format("{:.1f}M", m);
  if (m < 1000) return fmt::format("{:.0f}M", m);
  return fmt::format("{:.1f}B", m / 1e3);
}

// A field's value as TOML writes it: 'text', 1.5, true, ['a', 'b'].
std::string value_text(const util::FieldValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return "'" + x + "'";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return util::format_number(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else {
          std::string s;
          for (const auto& e : x) s += (s.empty() ? "'" : ", '") + e + "'";
          return "[" + s + "]";
        }
      },
      v);
}

// `text` wrapped at `width` columns, continuation lines indented by `indent`.
std::string wrap(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + line + "\n";
}

}  // namespace

std::string describe_catalog() {
  std::string s = "Mixers (model.mixers; layer i uses mixers[i % len]):\n";
  for (const auto& m : mixer_registry()) {
    std::string dirs = m.causal && m.bidirectional ? "causal, bidirectional"
                       : m.causal                  ? "causal only"
                                                   : "bidirectional only";
    if (m.causal && m.incremental) dirs += "; decodes step by step";
    if (!m.has_ffn) dirs += "; its block has no FFN";
    if (!m.section.empty()) dirs += "; keys [model." + m.section + "]";
    s += fmt::format("  {:<11} ", m.name);
    s += wrap(m.summary + " (" + dirs + ")" + (m.source.empty() ? "" : ". " + m.source), 14, 80);
    // Its section's keys, with the documentation each field declares.
    const ModelConfig defaults;
    ModelConfig::visit_sections(defaults, [&](const std::string& path, const auto& section,
                                              const auto& fields) {
      if (path.empty() || path != m.section) return;
      for (const auto& f : fields)
        s += std::string(14, ' ') +
             wrap("model." + path + "." + f.name + " = " + value_text(f.get(section)) + ": " +
                      f.doc,
                  18, 80);
    });
  }
  s += "\nPresets: parameters for a byte-level vocabulary of 256, at each size\n";
  s += fmt::format("{:<21}", "");
  for (const auto& z : size_presets()) s += fmt::format(" {:>7}", z.name);
  s += "\n";
  for (const auto& p : model_presets()) {
    s += fmt::format("{:<21}", p.name);
    for (const auto& z : size_presets())
      s += fmt::format(" {:>7}",
                       short_count(make_model_config(p.name, z.name).num_parameters_approx()));
    s += "\n";
  }
  s += "\n";
  for (const auto& p : model_presets()) {
    std::string what = p.summary;
    if (!p.source.empty()) what += ". " + p.source;
    if (!p.lm_variant.empty()) what += "; for language modelling use " + p.lm_variant;
    s += fmt::format("  {:<21} ", p.name);
    s += wrap(what, 24, 80);
  }
  s += "\nSizes (--size; tasks take cpu or paper instead):\n";
  for (const auto& z : size_presets())
    s += wrap(fmt::format("  {:<7} N {:>2}  D {:>4}  d_ff {:>4}  H {:>2}  L {:>4}  {}", z.name,
                          z.n_layers, z.d_model, z.d_ff, z.n_heads, z.max_len, z.source),
              10, 80);
  s += "A SentencePiece tokenizer (--tokenizer) sets the embedding and head sizes.\n";
  return s;
}

std::string preset_names_line() {
  std::string s;
  for (const auto& p : model_presets()) {
    if (!p.alias_of.empty()) continue;
    s += (s.empty() ? "" : ", ") + p.name;
    for (const auto& a : model_presets())
      if (a.alias_of == p.name) s += " (= " + a.name + ")";
  }
  return s;
}

}  // namespace seqmix::models
