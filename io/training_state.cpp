#include "training_state.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "../core/autograd.h"
#include "safetensors.h"

namespace ember::io {

namespace detail {
void state_get_failed(const std::string& key, const char* wanted, bool missing) {
  if (missing) EMBER_THROW("state dict has no key '", key, "'");
  EMBER_THROW("state dict key '", key, "' does not hold ", wanted);
}
}  // namespace detail

StateDict state_dict_from(const std::map<std::string, double>& values) {
  StateDict d;
  for (const auto& [k, v] : values) d[k] = v;
  return d;
}

std::map<std::string, double> state_doubles(const StateDict& dict) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : dict) out[k] = state_get<double>(dict, k);
  return out;
}

namespace {

using json = nlohmann::json;

constexpr const char* kFormatKey = "ember.format";
constexpr const char* kFormat = "ember.training_state.v1";
constexpr const char* kStateKey = "ember.state";
constexpr const char* kChecksumKey = "ember.checksum";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kExtraPrefix = "extra.";

template <typename... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  EMBER_THROW(path, ": ", args...);
}

// ---- checksum ---------------------------------------------------------------------------------

// CRC-32 (zlib) over the state JSON and every tensor's name, dtype, shape and bytes. Tensors are
// taken in name order so a tool that rewrites the file in another tensor order (safetensors'
// save_file sorts by dtype) keeps it valid. Fields are NUL-separated so "ab"+"c" != "a"+"bc".
std::string checksum(const std::string& state_json, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  // zlib's crc32_z(crc, NULL, 0) returns the *initial* CRC: an empty buffer (a zero-element
  // tensor's null data) must not reach it, or every field before it would be forgotten.
  auto feed = [](uLong crc, const void* p, size_t n) {
    return n == 0 ? crc : crc32_z(crc, static_cast<const Bytef*>(p), n);
  };
  const char nul = '\0';
  uLong crc = crc32_z(0L, Z_NULL, 0);
  crc = feed(crc, state_json.data(), state_json.size());
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& p : tensors) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (const auto* p : sorted) {
    const Tensor& t = p->second;  // CPU and contiguous: the caller made sure
    const std::string desc = p->first + nul + safetensors_dtype_name(t.dtype()) + nul + shape_str(t.shape()) + nul;
    crc = feed(crc, desc.data(), desc.size());
    crc = feed(crc, t.data(), static_cast<size_t>(t.nbytes()));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32:%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return buf;
}

// ---- StateValue <-> JSON ----------------------------------------------------------------------
// JSON keeps a number's kind as written: nlohmann writes a double with a '.' or an exponent
// ("1.0", "1e-08") and an int64 without, so bool/int/float survive the round trip. JSON has no
// NaN or infinity, so a non-finite double is written as {"float": "nan" | "inf" | "-inf"}.

json double_to_json(double v) {
  if (std::isfinite(v)) return v;
  return json{{"float", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf")}};
}

json value_to_json(const StateValue& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) {
          return double_to_json(x);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          json a = json::array();
          for (double d : x) a.push_back(double_to_json(d));
          return a;
        } else {
          return x;
        }
      },
      v);
}

json dict_to_json(const StateDict& d) {
  json o = json::object();
  for (const auto& [k, v] : d) o[k] = value_to_json(v);
  return o;
}

// Reads the JSON document back with every field's type checked; `where` names the field in
// errors ("optimizer.param_groups[0].options.lr").
struct JsonReader {
  const std::string& path;

  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail(path, "training state field '", where, "' ", what);
  }
  const json& field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) bad(where, "must be an object");
    const auto it = obj.find(key);
    if (it == obj.end()) bad(sub(where, key), "is missing");
    return *it;
  }
  std::string sub(const std::string& where, const char* key) const { return where.empty() ? key : where + "." + key; }

  int64_t as_int(const json& v, const std::string& where) const {
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
    if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return v.get<int64_t>();
    bad(where, "must be an int64, got " + v.dump());
  }
  uint64_t as_uint(const json& v, const std::string& where) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    bad(where, "must be a non-negative integer, got " + v.dump());
  }
  std::string as_string(const json& v, const std::string& where) const {
    if (v.is_string()) return v.get<std::string>();
    bad(where, "must be a string, got " + v.dump());
  }
  double as_double(const json& v, const std::string& where) const {
    if (v.is_number_float()) return v.get<double>();
    if (v.is_object() && v.size() == 1 && v.contains("float") && v["float"].is_string()) {
      const std::string s = v["float"].get<std::string>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    bad(where, "must be a float, got " + v.dump());
  }
  StateValue as_value(const json& v, const std::string& where) const {
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer()) return as_int(v, where);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
      std::vector<double> out;
      for (size_t i = 0; i < v.size(); ++i) out.push_back(as_double(v[i], where + "[" + std::to_string(i) + "]"));
      return out;
    }
    return as_double(v, where);
  }
  StateDict as_dict(const json& v, const std::string& where) const {
    if (!v.is_object()) bad(where, "must be an object, got " + v.dump());
    StateDict d;
    for (const auto& [k, x] : v.items()) d[k] = as_value(x, where + "." + k);
    return d;
  }
  std::map<std::string, std::string> as_string_map(const json& v, const std::string& where) const {
    if (!v.is_object()) bad(where, "must be an object, got " + v.dump());
    std::map<std::string, std::string> m;
    for (const auto& [k, x] : v.items()) m[k] = as_string(x, where + "." + k);
    return m;
  }
  std::vector<std::string> as_strings(const json& v, const std::string& where) const {
    if (!v.is_array()) bad(where, "must be an array of strings, got " + v.dump());
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(as_string(v[i], where + "[" + std::to_string(i) + "]"));
    return out;
  }
};

// ---- TrainingState -> JSON + tensors ----------------------------------------------------------

// Tensor names are listed in the JSON as well as stored in the file, so loading can check that
// the two agree exactly (no tensor missing, none unexplained).
json state_to_json(const TrainingState& s, std::vector<std::pair<std::string, Tensor>>& tensors) {
  json j;
  j["model_name"] = s.model_name;
  j["model_config"] = s.model_config;
  j["class_names"] = s.class_names;
  j["epoch"] = s.epoch;
  j["step"] = s.step;
  j["rng"] = {{"seed", s.rng.seed}, {"offset", s.rng.offset}};
  j["loader"] = {{"epoch", s.loader.epoch}, {"batch_index", s.loader.batch_index},
                 {"shuffle_seed", s.loader.shuffle_seed}};

  json opt_names = json::array();
  for (const auto& [name, t] : s.optimizer.tensors) {
    opt_names.push_back(name);
    tensors.emplace_back(kOptimizerPrefix + name, t);
  }
  j["optimizer"] = {{"name", s.optimizer.name}, {"tensors", opt_names}, {"scalars", dict_to_json(s.optimizer.scalars)}};

  j["scheduler"] = {{"name", s.scheduler.name}, {"values", dict_to_json(s.scheduler.values)}};
  j["extra"] = dict_to_json(s.extra);
  json extra_names = json::array();
  for (const auto& [name, t] : s.extra_tensors) {
    extra_names.push_back(name);
    tensors.emplace_back(kExtraPrefix + name, t);
  }
  j["extra_tensors"] = extra_names;
  return j;
}

}  // namespace

void save_training_state(const std::string& path, const TrainingState& state) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::string text;
  try {
    text = state_to_json(state, tensors).dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path, "training state has a string that is not valid UTF-8 (", e.what(), ")");
  }
  // The checksum is over the bytes as they will be on disk: CPU, contiguous.
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : tensors) {
      if (!t.defined()) fail(path, "tensor '", name, "' is undefined");
      t = t.to(Device::cpu()).contiguous();
    }
  }
  const std::map<std::string, std::string> metadata = {
      {kFormatKey, kFormat}, {kStateKey, text}, {kChecksumKey, checksum(text, tensors)}};
  save_safetensors(path, tensors, metadata);
}

TrainingState load_training_state(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const auto meta = [&](const char* key) -> const std::string* {
    const auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  const std::string* format = meta(kFormatKey);
  if (format == nullptr)
    fail(path, "not an ember training-state file (no '", kFormatKey, "' in __metadata__; a weights file?)");
  if (*format != kFormat)
    fail(path, "training-state format '", *format, "' is not the one this ember reads ('", kFormat, "')");
  const std::string* text = meta(kStateKey);
  const std::string* sum = meta(kChecksumKey);
  if (text == nullptr) fail(path, "'", kStateKey, "' is missing from __metadata__");
  if (sum == nullptr) fail(path, "'", kChecksumKey, "' is missing from __metadata__");
  const std::string actual = checksum(*text, file.tensors);
  if (actual != *sum)
    fail(path, "checksum mismatch (file says ", *sum, ", contents give ", actual,
         "): the file is corrupted or was edited");

  json j;
  try {
    j = json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, "'", kStateKey, "' is not valid JSON: ", e.what());
  }
  const JsonReader r{path};
  if (!j.is_object()) fail(path, "'", kStateKey, "' is not a JSON object");

  std::set<std::string> used;  // file tensors claimed by the JSON
  auto take = [&](const std::string& name, const std::string& where) -> Tensor {
    if (!file.contains(name)) r.bad(where, "lists tensor '" + name + "', which is not in the file");
    if (!used.insert(name).second) r.bad(where, "lists tensor '" + name + "' twice");
    return file.at(name);
  };

  TrainingState s;
  s.model_name = r.as_string(r.field(j, "model_name", ""), "model_name");
  s.model_config = r.as_string_map(r.field(j, "model_config", ""), "model_config");
  s.class_names = r.as_strings(r.field(j, "class_names", ""), "class_names");
  s.epoch = r.as_int(r.field(j, "epoch", ""), "epoch");
  s.step = r.as_int(r.field(j, "step", ""), "step");
  const json& rng = r.field(j, "rng", "");
  s.rng.seed = r.as_uint(r.field(rng, "seed", "rng"), "rng.seed");
  s.rng.offset = r.as_uint(r.field(rng, "offset", "rng"), "rng.offset");
  const json& loader = r.field(j, "loader", "");
  s.loader.epoch = r.as_int(r.field(loader, "epoch", "loader"), "loader.epoch");
  s.loader.batch_index = r.as_int(r.field(loader, "batch_index", "loader"), "loader.batch_index");
  s.loader.shuffle_seed = r.as_uint(r.field(loader, "shuffle_seed", "loader"), "loader.shuffle_seed");

  const json& opt = r.field(j, "optimizer", "");
  s.optimizer.name = r.as_string(r.field(opt, "name", "optimizer"), "optimizer.name");
  for (const std::string& name : r.as_strings(r.field(opt, "tensors", "optimizer"), "optimizer.tensors"))
    s.optimizer.tensors.emplace_back(name, take(kOptimizerPrefix + name, "optimizer.tensors"));
  s.optimizer.scalars = r.as_dict(r.field(opt, "scalars", "optimizer"), "optimizer.scalars");

  const json& sched = r.field(j, "scheduler", "");
  s.scheduler.name = r.as_string(r.field(sched, "name", "scheduler"), "scheduler.name");
  s.scheduler.values = r.as_dict(r.field(sched, "values", "scheduler"), "scheduler.values");
  s.extra = r.as_dict(r.field(j, "extra", ""), "extra");
  for (const std::string& name : r.as_strings(r.field(j, "extra_tensors", ""), "extra_tensors"))
    s.extra_tensors.emplace_back(name, take(kExtraPrefix + name, "extra_tensors"));

  for (const auto& [name, t] : file.tensors)
    if (!used.count(name)) fail(path, "tensor '", name, "' is not part of the training state");
  return s;
}

}  // namespace ember::io
