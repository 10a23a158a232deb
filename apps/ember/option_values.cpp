// Strict option values (Note [Strict option values] in apps/ember/option_values.h).

#include "option_values.h"

#include <charconv>
#include <cstdint>

namespace ember::app {

namespace {

bool is_decimal_integer(const std::string& s) {
  const size_t start = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (start == s.size()) return false;
  for (size_t i = start; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// The check of one value of an option of CLI11 type `type` ("INT", "UINT", "FLOAT", "TEXT", ...);
// an error message ("" when the value is fine), with `value` made canonical.
std::string check_value(std::string& value, const std::string& type) {
  if (value.empty()) return "the value is empty (give one, or leave the option out)";
  if (type != "INT" && type != "UINT") return "";
  const bool is_unsigned = type == "UINT";
  if (!is_decimal_integer(value))
    return "'" + value + "' is not an integer" + (value.find_first_of(".eE") != std::string::npos ? "" : " (decimal digits)");
  if (is_unsigned && value[0] == '-') return "must be a non-negative integer, got " + value;
  const char* first = value.data() + (value[0] == '+' ? 1 : 0);
  const char* last = value.data() + value.size();
  if (is_unsigned) {
    uint64_t v = 0;
    if (std::from_chars(first, last, v).ec != std::errc()) return "'" + value + "' is out of range";
    value = std::to_string(v);
  } else {
    int64_t v = 0;
    if (std::from_chars(first, last, v).ec != std::errc()) return "'" + value + "' is out of range";
    value = std::to_string(v);
  }
  return "";
}

}  // namespace

void make_values_strict(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_size() == 0) continue;  // a flag
    const std::string type = o->get_type_name();
    o->check(CLI::Validator([type](std::string& value) { return check_value(value, type); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) make_values_strict(*sub);
}

std::string conversion_error(const std::string& name, const std::string& value) {
  // make_values_strict let an integer through only within int64: CLI11's conversion failed on a
  // narrower option (an int).
  if (is_decimal_integer(value)) return name + ": '" + value + "' is out of range";
  return name + ": '" + value + "' is not a number";
}

}  // namespace ember::app
