#include "seqmix/models/mixer_registry.h"

#include <deque>
#include <mutex>
#include <stdexcept>


namespace seqmix::models {

namespace {

struct Registry {
  std::mutex mutex;
  std::deque<MixerSpec> rows;  // a deque: adding a row keeps references to the others valid
  size_t builtins = 0;
  Registry() {
    // The built-in mixers: one row per folder of src/mixers, in SEQMIX_MIXERS order.
    for (auto& spec : builtin_mixers()) rows.push_back(std::move(spec));
    builtins = rows.size();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names(const std::deque<MixerSpec>& rows) {
  std::string s;
  for (size_t i = 0; i < rows.size(); ++i)
    s += (i == 0 ? "" : i + 1 == rows.size() ? " or " : ", ") + rows[i].name;
  return s;
}

}  // namespace

const std::deque<MixerSpec>& mixer_registry() { return registry().rows; }

const MixerSpec& find_mixer(const std::string& name) {
  const auto& rows = registry().rows;
  for (const auto& r : rows)
    if (r.name == name) return r;
  throw std::invalid_argument("unknown mixer '" + name + "' (expected " + names(rows) + ")");
}

void register_mixer(MixerSpec spec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (spec.name.empty()) throw std::invalid_argument("register_mixer: the name is empty");
  if (!spec.build) throw std::invalid_argument("register_mixer: '" + spec.name + "' has no build");
  // The count must not need the model: a configuration is checked against the machine's
  // memory (RunConfig::check_resources) before anything is built.
  if (!spec.parameters)
    throw std::invalid_argument("register_mixer: '" + spec.name + "' has no parameters formula");
  for (const auto& row : r.rows) {
    if (row.name == spec.name)
      throw std::invalid_argument("register_mixer: a mixer named '" + spec.name + "' exists");
    if (!spec.section.empty() && row.section == spec.section)
      throw std::invalid_argument("register_mixer: section [model." + spec.section +
                                  "] belongs to mixer '" + row.name + "'");
  }
  if (!spec.section.empty() && !spec.defaults.has_value())
    throw std::invalid_argument("register_mixer: '" + spec.name + "' declares section [model." +
                                spec.section + "] without its defaults");
  r.rows.push_back(std::move(spec));
}

void unregister_mixer(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = r.builtins; i < r.rows.size(); ++i)
    if (r.rows[i].name == name) {
      r.rows.erase(r.rows.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  throw std::invalid_argument("unregister_mixer: no registered mixer named '" + name + "'");
}

}  // namespace seqmix::models
