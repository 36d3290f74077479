#include "seqmix/train/reporting/metrics.h"

#include <stdexcept>

namespace seqmix::train {

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot open metrics file '" + path + "' for writing");
}

void MetricsWriter::write(const nlohmann::json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write to metrics file '" + path_ + "'");
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open metrics file '" + path + "'");
  std::vector<nlohmann::json> lines;
  std::string s;
  for (int64_t n = 1; std::getline(in, s); ++n) {
    if (s.empty()) continue;
    try {
      lines.push_back(nlohmann::json::parse(s));
    } catch (const nlohmann::json::exception& e) {  // parse_error, out_of_range (overflow)
      throw std::runtime_error("metrics file '" + path + "' line " + std::to_string(n) +
                               " is not JSON: " + e.what());
    }
  }
  return lines;
}

}  // namespace seqmix::train
