#include "seqmix/models/catalog.h"

#include <fmt/format.h>

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
