#pragma once
// A path in single quotes, for the messages of the file readers (read_idx, ImageFolder):
// "read_idx: cannot open '/data/x.gz': ...". Internal to data/.

#include <filesystem>
#include <string>

namespace ember::data::detail {

// Appended piecewise: `"'" + s + "'"` trips GCC 12's false -Wrestrict (libstdc++ PR 105329).
inline std::string quoted(const std::filesystem::path& p) {
  std::string s = "'";
  s.append(p.string());
  s.push_back('\'');
  return s;
}

}  // namespace ember::data::detail
