#pragma once
/// @file catalog.h
/// What `seqmix info` prints, generated from the mixer registry (models/mixer_registry.h)
/// and the preset and size tables (models/presets.h), so a registered mixer or a new preset
/// row appears without touching the CLI. Lines fit an 80-column terminal.
///
/// Example:
///   std::cout << seqmix::models::describe_catalog();
#include <string>

namespace seqmix::models {

/// Three listings: the mixers (name, directions, whether it decodes step by step, the
/// [model.<section>] it reads with each key's default and documentation, summary, source); the presets (parameters at every size for a
/// byte-level vocabulary of 256, then each preset's summary); the sizes (N, D, d_ff, heads,
/// max_len, source).
std::string describe_catalog();

/// One line listing the preset names for --model help texts: "weird-net (= aib-net),
/// weird-net-a, ...".
std::string preset_names_line();

}  // namespace seqmix::models
