#pragma once
// What a call throws, as text, for tests that check error messages.
#include <exception>
#include <functional>
#include <string>

namespace seqmix::testing {

/// The what() of the std::exception `fn` throws, or "(no error)" if it returns.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace seqmix::testing
