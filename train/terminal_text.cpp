// printable and shell_quote (Note [Printing untrusted names] in train/terminal_text.h).

#include "terminal_text.h"

#include <cstdio>

namespace ember::train {

namespace {
// One control byte or a backslash as a C escape: \n, \e, \x01, \\.
void append_escape(std::string& out, unsigned char c) {
  switch (c) {
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case 0x1B: out += "\\e"; break;
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }
}  // namespace

std::string printable(std::string_view text, Newlines newlines) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_control(c) && !(c == '\n' && newlines == Newlines::keep))
      append_escape(out, c);
    else
      out += ch;
  }
  return out;
}

std::string shell_quote(std::string_view arg) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  };
  bool quote = arg.empty(), control = false;
  for (const char c : arg) {
    quote = quote || !plain(c);
    control = control || is_control(static_cast<unsigned char>(c));
  }
  if (!quote) return std::string(arg);
  std::string out = control ? "$'" : "'";
  for (const char c : arg) {
    if (control && (c == '\\' || c == '\'' || is_control(static_cast<unsigned char>(c)))) {
      if (c == '\'')
        out += "\\'";
      else
        append_escape(out, static_cast<unsigned char>(c));
    } else if (!control && c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

}  // namespace ember::train
