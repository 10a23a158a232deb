// translate_cuda IN_CU OUT_CPP: turns a plain CUDA source file into C++ for the SIMT emulator,
// so that a kernel lab (kernels/labs) reads exactly as it would for nvcc. Two things in CUDA are
// not C++, and are rewritten in place, keeping every line where it was (a `#line` directive makes
// compiler errors and the emulator's diagnostics name the CUDA file and its lines):
//
//   kernel<<<grid, block[, smem[, stream]]>>>(args...)
//       -> EMBER_SIMT_LAUNCH(Fiber, (kernel), grid, block, smem, stream, args...)
//          (the kernel expression may be a template-id: k<float, 4><<<...>>>)
//   extern __shared__ [__align__(n)] T name[];
//       -> T* name = reinterpret_cast<T*>(...dynamic_shared_memory(...));
//
// and the emulator's kernel language (kernels/simt/simt.h) is included first. Comments and string
// literals are left alone. A `<<<` it cannot parse is an error naming the line.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& text, size_t pos, const std::string& what) {
  const long line = 1 + static_cast<long>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n'));
  std::cerr << file << ":" << line << ": translate_cuda: " << what << "\n";
  std::exit(1);
}

// code[i] is true where text[i] is code (not inside a comment, string or character literal).
std::vector<bool> code_mask(const std::string& t) {
  std::vector<bool> code(t.size(), true);
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 2, "//") == 0) {
      while (i < t.size() && t[i] != '\n') code[i++] = false;
    } else if (t.compare(i, 2, "/*") == 0) {
      const size_t end = t.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? t.size() : end + 2;
      while (i < stop) code[i++] = false;
    } else if (t[i] == '"' || t[i] == '\'') {
      const char q = t[i];
      code[i++] = false;
      while (i < t.size() && t[i] != q) {
        if (t[i] == '\\') code[i++] = false;
        if (i < t.size()) code[i++] = false;
      }
      if (i < t.size()) code[i++] = false;
    } else {
      ++i;
    }
  }
  return code;
}

// The index just past the bracket matching t[open] ('(' or '<'), skipping nested () [] {} <>.
size_t match_forward(const std::string& t, size_t open, char o, char c) {
  int depth = 0;
  for (size_t i = open; i < t.size(); ++i) {
    if (t[i] == o) ++depth;
    if (t[i] == c && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

// Splits at the commas of nesting depth 0.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> parts(1);
  int depth = 0;
  for (char ch : s) {
    if (ch == '(' || ch == '[' || ch == '{' || ch == '<') ++depth;
    if (ch == ')' || ch == ']' || ch == '}' || ch == '>') --depth;
    if (ch == ',' && depth == 0) parts.emplace_back();
    else parts.back() += ch;
  }
  return parts;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }

std::string rewrite_launches(const std::string& file, std::string t) {
  for (;;) {
    const std::vector<bool> code = code_mask(t);
    size_t at = std::string::npos;
    for (size_t p = t.find("<<<"); p != std::string::npos; p = t.find("<<<", p + 3))
      if (code[p]) {
        at = p;
        break;
      }
    if (at == std::string::npos) return t;
    // The kernel expression before `<<<`: an (optionally qualified) name, maybe with <template args>.
    size_t b = at;
    while (b > 0 && std::isspace(static_cast<unsigned char>(t[b - 1]))) --b;
    size_t expr_end = b;
    if (b > 0 && t[b - 1] == '>') {
      int depth = 0;
      size_t i = b;
      while (i > 0) {
        --i;
        if (t[i] == '>') ++depth;
        if (t[i] == '<' && --depth == 0) break;
      }
      if (depth != 0) fail(file, t, at, "unbalanced template arguments before <<<");
      b = i;
    }
    while (b > 0 && ident_char(t[b - 1])) --b;
    if (b == expr_end) fail(file, t, at, "no kernel name before <<<");
    const std::string kernel = t.substr(b, expr_end - b);
    const size_t close = t.find(">>>", at + 3);
    if (close == std::string::npos) fail(file, t, at, "<<< without >>>");
    std::vector<std::string> cfg = split_top(t.substr(at + 3, close - at - 3));
    if (cfg.size() < 2 || cfg.size() > 4) fail(file, t, at, "<<<...>>> needs 2 to 4 arguments (grid, block, smem, stream)");
    if (cfg.size() < 3) cfg.push_back("0");
    if (cfg.size() < 4) cfg.push_back("0");
    size_t open = close + 3;
    while (open < t.size() && std::isspace(static_cast<unsigned char>(t[open]))) ++open;
    if (open >= t.size() || t[open] != '(') fail(file, t, at, "expected (arguments) after >>>");
    const size_t args_end = match_forward(t, open, '(', ')');
    if (args_end == std::string::npos) fail(file, t, at, "unbalanced parentheses in the launch's arguments");
    std::string args = t.substr(open + 1, args_end - open - 2);
    bool empty_args = args.find_first_not_of(" \t\r\n") == std::string::npos;
    // The whitespace between the pieces is kept (with its newlines) so that lines stay in place.
    std::string out = "EMBER_SIMT_LAUNCH(::ember::simt::detail::LaunchKind::Fiber, (" + kernel + "), " + cfg[0] + "," +
                      cfg[1] + "," + cfg[2] + "," + cfg[3] + t.substr(close + 3, open - close - 3) +
                      (empty_args ? "" : ", " + args) + ")";
    t.replace(b, args_end - b, out);
  }
}

std::string rewrite_dynamic_shared(std::string t) {
  static const std::regex decl(
      R"(extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:<>, ]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;)");
  return std::regex_replace(t, decl,
                            "$1* $2 = reinterpret_cast<$1*>(::ember::simt::detail::dynamic_shared_memory(__FILE__, __LINE__));");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: translate_cuda IN_CU OUT_CPP\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "translate_cuda: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = rewrite_dynamic_shared(rewrite_launches(argv[1], ss.str()));
  std::ostringstream out;
  out << "// Generated by translate_cuda from " << argv[1] << ": edit that file, not this one.\n"
      << "#include <ember/kernels/simt/simt.h>\n"
      << "#line 1 \"" << argv[1] << "\"\n"
      << t;
  const std::string tmp = std::string(argv[2]) + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary);
    o << out.str();
    if (!o) {
      std::cerr << "translate_cuda: cannot write " << tmp << "\n";
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), argv[2]) != 0) {
    std::cerr << "translate_cuda: cannot rename " << tmp << " to " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
