#include "error.h"

#include <cstdlib>

namespace ember::detail {

// EMBER_DEBUG_LOCATION=1 appends the C++ source location to every message; by default the message
// is what a user needs (op, shapes, dtypes), not where in ember it was raised.
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  static const bool with_location = [] {
    const char* v = std::getenv("EMBER_DEBUG_LOCATION");
    return v != nullptr && v[0] == '1';
  }();
  if (with_location) throw Error(msg + " [" + file + ":" + std::to_string(line) + "]");
  throw Error(msg);
}

}  // namespace ember::detail
