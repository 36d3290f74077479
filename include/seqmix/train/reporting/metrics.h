#pragma once
/// @file metrics.h
/// `metrics.jsonl`: one JSON object per line, flushed as written, so a killed run keeps every
/// line it reported. Training lines carry "split": "train" with "loss" (mean nats per token
/// over the log interval), "perplexity" = exp(loss) and, for byte-level models, "bpc";
/// evaluation lines carry the split scored ("valid", "test", or "train_eval" for the
/// training split) with "loss", "perplexity", "bpc" (bits per character: the negative
/// log-likelihood in bits over the bytes of text scored), "tokens", "bytes"; a classifier's
/// carry "accuracy" instead of bpc. Every line has "step" and "time_s".
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace seqmix::train {

class MetricsWriter {
 public:
  /// @param append  keep existing lines (resuming a run) instead of starting a new file.
  /// @throws std::runtime_error naming the path if it cannot be opened.
  MetricsWriter(const std::string& path, bool append);
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  std::ofstream out_;
};

/// Reads every line of a metrics file. @throws std::runtime_error naming the line that is
/// not JSON.
std::vector<nlohmann::json> read_metrics(const std::string& path);

}  // namespace seqmix::train
