#include "safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <new>
#include <set>
#include <sstream>
#include <span>
#include <unordered_set>

#include "../core/autograd.h"
#include "atomic_file.h"

namespace ember::io {

// Tensor bytes are copied between memory and file as they are: that is only the format's
// little-endian layout on a little-endian host (x86-64, AArch64, RISC-V). A big-endian port would
// byte-swap here.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The reference implementation's limit (MAX_HEADER_SIZE): a length above it is a garbled file, and
// refusing it keeps a bad length from making us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

// Throws "<path>: <args...>". A NUL byte from the file (a name or a dtype written with \u0000)
// is spelled "\0": what() is a C string, which would end at it and hide the rest.
template <typename... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  std::string message = os.str();
  for (size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at + 2))
    message.replace(at, 1, "\\0");
  EMBER_THROW(path, ": ", message);
}

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::u8, "U8"},   {DType::boolean, "BOOL"},
};
// Valid in the format but with no ember dtype: named in the error so the user knows the file is
// fine and ember is the limit.
constexpr const char* kForeignDTypes[] = {"I8", "I16", "U16", "U32", "U64", "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                          "F4", "F6_E2M3", "F6_E3M2", "C64"};

std::string supported_names() {
  std::string s;
  for (const auto& d : kDTypeNames) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// One tensor entry of a header, after its fields were checked one by one.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string offsets_str(uint64_t b, uint64_t e) {
  std::string s = "[";  // appended piecewise: "[" + to_string(..) trips a GCC 12 -Wrestrict false positive
  s += std::to_string(b);
  s += ", ";
  s += std::to_string(e);
  s += "]";
  return s;
}

// The header, parsed: its tensor entries in header order and its metadata.
struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

uint64_t get_unsigned(const std::string& path, const std::string& name, const char* field, const json& v) {
  if (!v.is_number_unsigned())
    fail(path, "tensor '", name, "': ", field, " must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& path, const std::string& name, const json& info) {
  if (!info.is_object()) fail(path, "tensor '", name, "': expected an object with dtype, shape and data_offsets");
  Entry e;
  e.name = name;
  const auto dt = info.find("dtype");
  if (dt == info.end()) fail(path, "tensor '", name, "': missing \"dtype\"");
  if (!dt->is_string()) fail(path, "tensor '", name, "': \"dtype\" must be a string, got ", dt->dump());
  const std::string& dtype_name = dt->get_ref<const std::string&>();
  if (dtype_name.find('\0') != std::string::npos)  // in a C string the message would end at the NUL
    fail(path, "tensor '", name, "': unknown dtype '", dtype_name, "' (supported: ", supported_names(), ")");
  try {
    e.dtype = safetensors_dtype(dtype_name);
  } catch (const Error& err) {
    fail(path, "tensor '", name, "': ", err.what());
  }

  const auto sh = info.find("shape");
  if (sh == info.end()) fail(path, "tensor '", name, "': missing \"shape\"");
  if (!sh->is_array()) fail(path, "tensor '", name, "': \"shape\" must be an array, got ", sh->dump());
  if (sh->size() > static_cast<size_t>(kMaxDims))
    fail(path, "tensor '", name, "': shape ", sh->dump(), " has ", sh->size(), " dimensions; ember supports at most ",
         kMaxDims);
  // numel * element size must fit comfortably: checked in 128-bit-free steps against int64.
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    const uint64_t n = get_unsigned(path, name, "\"shape\"", d);
    if (n > kLimit || (n != 0 && numel > kLimit / n)) overflow = true;
    numel = overflow ? numel : numel * n;
    e.shape.push_back(static_cast<int64_t>(std::min(n, kLimit)));
  }
  const uint64_t esize = static_cast<uint64_t>(dtype_size(e.dtype));
  if (overflow || numel > kLimit / esize) fail(path, "tensor '", name, "': shape ", sh->dump(), " is too large");
  const uint64_t nbytes = numel * esize;

  const auto off = info.find("data_offsets");
  if (off == info.end()) fail(path, "tensor '", name, "': missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2)
    fail(path, "tensor '", name, "': \"data_offsets\" must be [begin, end], got ", off->dump());
  e.begin = get_unsigned(path, name, "\"data_offsets\"", (*off)[0]);
  e.end = get_unsigned(path, name, "\"data_offsets\"", (*off)[1]);
  if (e.end < e.begin)
    fail(path, "tensor '", name, "': data_offsets ", offsets_str(e.begin, e.end), " end before they begin");
  if (e.end - e.begin != nbytes)
    fail(path, "tensor '", name, "': data_offsets ", offsets_str(e.begin, e.end), " hold ", e.end - e.begin,
         " bytes but shape ", shape_str(e.shape), " of ", dt->get<std::string>(), " needs ", nbytes, " bytes");
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& m) {
  if (!m.is_object()) fail(path, "\"__metadata__\" must be an object of strings, got ", m.dump());
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) fail(path, "\"__metadata__\" value for '", k, "' must be a string, got ", v.dump());
    out[k] = v.get<std::string>();
  }
  return out;
}

// Note [Linear header parsing]
// A header may hold millions of entries within its 100 MB limit. Parsed into one JSON document,
// nlohmann's ordered_json (a vector searched on every insertion) took time quadratic in the
// number of entries: 35 s for 80,000 entries, hours at the limit. Instead the parser's callback
// takes each top-level entry as soon as its value ends, checks it into an Entry (or the
// metadata) and discards its JSON, so the document never grows: time linear in the header (a
// hash set of names finds duplicates, which nlohmann would keep silently and the reference
// implementation rejects; check_layout's sort of the offsets adds the n log n) and memory
// proportional to the entries. A container nested deeper than the format
// allows (a tensor's "shape" holds numbers only) is refused where it starts, so a header of
// nested brackets costs nothing either.
Header parse_header(const std::string& path, const std::string& text) {
  Header out;
  std::unordered_set<std::string> seen;
  std::string key;  // the top-level key whose value is being parsed
  auto take = [&](const json& value) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(path, value);
    else
      out.entries.push_back(parse_entry(path, key, value));
  };
  using event_t = nlohmann::json::parse_event_t;
  auto on_event = [&](int depth, event_t event, json& parsed) {
    switch (event) {
      case event_t::key:
        if (depth == 1) {
          key = parsed.get<std::string>();
          if (!seen.insert(key).second) fail(path, "header names '", key, "' more than once");
        }
        return true;
      case event_t::object_start:
      case event_t::array_start:
        if (depth == 0 && event == event_t::array_start) fail(path, "header is not a JSON object");
        if (depth >= 3) fail(path, "'", key, "': a value nested ", depth, " levels deep (the format has 2)");
        return true;
      case event_t::object_end:
      case event_t::array_end:
      case event_t::value:
        if (depth != 1) return true;
        take(parsed);
        return false;  // discarded: the document stays one empty object
    }
    return true;
  };
  try {
    const json header = json::parse(text, on_event);
    if (!header.is_object()) fail(path, "header is not a JSON object");
  } catch (const nlohmann::json::exception& e) {
    fail(path, "header is not valid JSON: ", e.what());
  }
  return out;
}

// The tensors sorted by offset must tile [0, data_bytes) exactly, as the format requires.
void check_layout(const std::string& path, std::vector<const Entry*> by_offset, uint64_t data_bytes) {
  for (const Entry* e : by_offset)
    if (e->end > data_bytes)
      fail(path, "tensor '", e->name, "': data_offsets ", offsets_str(e->begin, e->end),
           " run past the end of the data section (", data_bytes, " bytes): the file is truncated or garbled");
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < covered)
      fail(path, "tensor '", e->name, "': data_offsets ", offsets_str(e->begin, e->end), " overlap tensor '",
           prev->name, "' ", offsets_str(prev->begin, prev->end));
    if (e->begin > covered)
      fail(path, "bytes [", covered, ", ", e->begin, ") of the data section belong to no tensor (gap before '", e->name,
           "')");
    covered = e->end;
    prev = e;
  }
  if (covered != data_bytes)
    fail(path, "the data section has ", data_bytes, " bytes but the tensors cover only ", covered,
         " (trailing bytes belong to no tensor)");
}

}  // namespace

// ---- dtype names ------------------------------------------------------------------------------

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  EMBER_THROW("safetensors: no safetensors name for dtype ", dtype);
}

DType safetensors_dtype(const std::string& name) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  for (const char* f : kForeignDTypes)
    if (name == f)
      EMBER_THROW("dtype ", name, " is valid safetensors but ember has no such dtype (supported: ", supported_names(),
                  ")");
  EMBER_THROW("unknown dtype '", name, "' (supported: ", supported_names(), ")");
}

// ---- SafetensorsFile --------------------------------------------------------------------------

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  EMBER_THROW(path, ": no tensor named '", name, "'");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const auto& p : tensors) out.push_back(p.first);
  return out;
}

// ---- save -------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == kMetadataKey) fail(path, "'", kMetadataKey, "' is reserved and cannot name a tensor");
    if (!names.insert(name).second) fail(path, "tensor name '", name, "' appears more than once");
    if (!t.defined()) fail(path, "tensor '", name, "' is undefined");
  }
  // Data layout: widest elements first (stable), so every tensor starts at a multiple of its
  // element size (Note [safetensors layout]); the header keeps the caller's order.
  std::vector<size_t> layout(tensors.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  for (size_t i : layout) {
    begin[i] = offset;
    offset += static_cast<uint64_t>(tensors[i].second.nbytes());
  }

  // The header text is written entry by entry (one document built by insertion into ordered_json
  // would search its keys on every insertion: Note [Linear header parsing]); compact, like the
  // reference writer (serde_json::to_string), with the metadata first, as it writes it.
  std::string text = "{";
  try {
    if (!metadata.empty()) text += json(kMetadataKey).dump() + ":" + json(metadata).dump();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i].second;
      ordered_json info = ordered_json::object();
      info["dtype"] = safetensors_dtype_name(t.dtype());
      info["shape"] = t.shape().vec();
      info["data_offsets"] = {begin[i], begin[i] + static_cast<uint64_t>(t.nbytes())};
      if (text.size() > 1) text += ',';
      text += json(tensors[i].first).dump() + ":" + info.dump();
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, "a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text += '}';
  // Pad so the data section starts 8-byte aligned (8 + text.size() is then a multiple of 8).
  text.append((8 - text.size() % 8) % 8, ' ');

  write_file_atomic(path, [&](FileWriter& w) {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    w.write(len, 8);
    w.write(text);
    NoGradGuard no_grad;  // the copies below are I/O, not part of any graph
    for (size_t i : layout) {
      // One CPU contiguous copy at a time (a no-op for a CPU contiguous tensor), so saving a GPU
      // model needs host memory for its largest tensor only.
      const Tensor c = tensors[i].second.to(Device::cpu()).contiguous();
      w.write(c.data(), static_cast<size_t>(c.nbytes()));
    }
  });
}

// ---- load -------------------------------------------------------------------------------------

namespace {

// Reads `n` bytes at `offset` of the file (or buffer) into dst, or throws naming `what`.
using ReadAt = std::function<void(uint64_t offset, void* dst, size_t n, const std::string& what)>;

// The header of a file of `file_bytes` bytes, read and checked before any tensor exists: its
// length, its JSON (Note [Linear header parsing]) and the layout of the data section.
Header read_header(const std::string& path, uint64_t file_bytes, const ReadAt& read, uint64_t& data_start) {
  if (file_bytes < 8)
    fail(path, "file is too short to be safetensors (", file_bytes, " bytes; the 8-byte header length alone needs 8)");
  uint8_t len[8];
  read(0, len, 8, "the header length");
  const uint64_t n = read_u64_le(len);
  if (n > kMaxHeaderBytes)
    fail(path, "header length ", n, " is over the ", kMaxHeaderBytes,
         "-byte limit: the file is garbled or not safetensors");
  if (n > file_bytes - 8)
    fail(path, "header length ", n, " runs past the end of the file (", file_bytes,
         " bytes): the file is truncated or not safetensors");
  if (n < 2) fail(path, "header length ", n, " is too small to hold a JSON object");

  std::string text(n, '\0');
  read(8, text.data(), n, "the header");
  if (text[0] != '{') fail(path, "header does not start with '{': the file is garbled or not safetensors");
  // nlohmann's parser stops at a NUL byte as if the input ended there, hiding what follows; raw
  // NUL is never valid JSON, so refuse it outright.
  if (text.find('\0') != std::string::npos) fail(path, "header contains a NUL byte: the file is garbled");
  Header header = parse_header(path, text);
  data_start = 8 + n;
  std::vector<const Entry*> by_offset;
  by_offset.reserve(header.entries.size());
  for (const Entry& e : header.entries) by_offset.push_back(&e);
  check_layout(path, by_offset, file_bytes - data_start);
  return header;
}

// The tensors of a checked header, each read straight into its storage.
SafetensorsFile read_tensors(const std::string& path, Header header, uint64_t data_start, const ReadAt& read) {
  SafetensorsFile out;
  out.path = path;
  out.metadata = std::move(header.metadata);
  out.tensors.reserve(header.entries.size());
  for (const Entry& e : header.entries) {
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    Tensor t;
    try {
      t = empty(e.shape, {.dtype = e.dtype});
    } catch (const std::bad_alloc&) {
      fail(path, "tensor '", e.name, "': cannot allocate ", nbytes, " bytes: out of memory");
    } catch (const Error& err) {
      fail(path, "tensor '", e.name, "': cannot allocate ", nbytes, " bytes: ", err.what());
    }
    if (nbytes > 0) read(data_start + e.begin, t.data(), nbytes, "tensor '" + e.name + "'");
    if (e.dtype == DType::boolean) {
      const uint8_t* p = static_cast<const uint8_t*>(t.data());
      for (size_t i = 0; i < nbytes; ++i)
        if (p[i] > 1)
          fail(path, "tensor '", e.name, "': BOOL element ", i, " is byte ", int(p[i]), ", not 0 or 1");
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

// This machine's memory in bytes (0 when unknown).
uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  const FileReader f(path);
  const ReadAt read = [&](uint64_t offset, void* dst, size_t n, const std::string& what) {
    f.read_at(offset, dst, n, what);
  };
  uint64_t data_start = 0;
  Header header = read_header(path, f.size(), read, data_start);
  // The tensors fill the data section exactly (check_layout): what they need is known now.
  const uint64_t data_bytes = f.size() - data_start, memory = physical_memory_bytes();
  if (memory > 0 && data_bytes > memory)
    fail(path, "its tensors hold ", data_bytes, " bytes, more than this machine's memory (", memory, " bytes)");
  return read_tensors(path, std::move(header), data_start, read);
}

SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes, const std::string& name) {
  const ReadAt read = [&](uint64_t offset, void* dst, size_t n, const std::string& what) {
    if (offset > bytes.size() || n > bytes.size() - offset)
      EMBER_THROW(name, ": unexpected end of data reading ", what);
    if (n > 0) std::memcpy(dst, bytes.data() + offset, n);
  };
  uint64_t data_start = 0;
  Header header = read_header(name, bytes.size(), read, data_start);
  return read_tensors(name, std::move(header), data_start, read);
}

}  // namespace ember::io
