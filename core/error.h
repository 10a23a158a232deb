#pragma once
// ember::Error and the check macros.
//
// Library code reports every failure by throwing ember::Error; it never calls exit() or abort().
// The message names the op and the shapes / dtypes / devices involved, e.g.
//   "add: shapes (2, 3) and (4,) cannot be broadcast together"

#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
// Builds a message from any streamable pieces: format_message("x=", 3, " y=", shape).
template <typename... Args>
std::string format_message(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace ember

// Throw ember::Error with a message assembled from the arguments.
#define EMBER_THROW(...) ::ember::detail::throw_error(__FILE__, __LINE__, ::ember::detail::format_message(__VA_ARGS__))

// Check a condition; on failure throw ember::Error with the message.
#define EMBER_CHECK(cond, ...)   \
  do {                           \
    if (!(cond)) {               \
      EMBER_THROW(__VA_ARGS__);  \
    }                            \
  } while (0)
