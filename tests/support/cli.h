#pragma once
/// @file cli.h
/// Helpers for tests that run the seqmix command line as a user would: the binary is
/// $SEQMIX_BIN (set by CTest, see cmake/SeqmixHelpers.cmake), output is stdout + stderr.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqmix::testing {

struct CliResult {
  int code;            ///< exit status, -1 if killed by a signal
  std::string output;  ///< stdout + stderr
};

/// The seqmix binary under test.
inline std::string seqmix_bin() {
  const char* bin = std::getenv("SEQMIX_BIN");
  return bin ? bin : "seqmix";
}

/// Runs the shell command line `cmd` and returns what it wrote to the pipe; `status` gets
/// its wait status (-1 if it could not be started).
inline std::string read_command(const std::string& cmd, int& status) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return "popen failed";
  }
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  status = pclose(p);
  return out;
}

/// Runs `seqmix <args>` through the shell; `env` is prepended as `env <env>` (e.g. "-u VAR"
/// or "VAR=value") when not empty.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  int status = 0;
  const std::string out = read_command(
      (env.empty() ? "" : "env " + env + " ") + seqmix_bin() + " " + args + " 2>&1", status);
  return {status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// The lines of `out` that are JSON objects, parsed.
inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    const std::string line =
        out.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return rows;
}

/// A small text corpus (17 KiB of one repeated sentence) at `dir`/c.txt; returns its path.
inline std::string tiny_corpus(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  std::ofstream(dir + "/c.txt") << text;
  return dir + "/c.txt";
}

/// The whole content of a file ("" if it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace seqmix::testing
