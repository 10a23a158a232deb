// ListFileDataset (format and contract in list_file.h).

#include "list_file.h"

#include <charconv>
#include <fstream>
#include <string>

#include "../io/atomic_file.h"

namespace ember::data {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

ListFileDataset::ListFileDataset(const std::filesystem::path& list_path, DecodeOptions decode)
    : ImageFileDataset("ListFileDataset", decode, JpegDraft::off) {
  const std::string name = list_path.string();
  std::error_code ec;
  EMBER_CHECK(!std::filesystem::is_directory(list_path, ec), name, ": is a directory, not a list file");
  io::check_regular_file(name);  // a FIFO would block the open (Note [Reading untrusted files])
  std::ifstream in(list_path);
  EMBER_CHECK(in.is_open(), name, ": cannot open list file");
  const std::filesystem::path base = list_path.parent_path();
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t comma = t.rfind(',');
    EMBER_CHECK(comma != std::string::npos, name, ":", line_no, ": expected \"path,label\", got \"", t, "\"");
    const std::string path = trim(t.substr(0, comma));
    const std::string label_text = trim(t.substr(comma + 1));
    EMBER_CHECK(!path.empty(), name, ":", line_no, ": empty path");
    int64_t label = -1;
    const char* first = label_text.data();
    const char* last = first + label_text.size();
    const auto [end, err] = std::from_chars(first, last, label);
    EMBER_CHECK(err == std::errc() && end == last && !label_text.empty() && label >= 0, name, ":", line_no,
                ": label \"", label_text, "\" is not a non-negative integer");
    std::filesystem::path p(path);
    if (p.is_relative()) p = base / p;
    samples_.push_back({p, label});
  }
  EMBER_CHECK(!in.bad(), name, ": read error");
  EMBER_CHECK(!samples_.empty(), name, ": the list names no sample");
}

}  // namespace ember::data
