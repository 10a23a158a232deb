// The parser fuzz targets and their seeds (contract in fuzz/parser_targets.h).

#include "parser_targets.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include <ember/core/error.h>
#include <ember/io/safetensors.h>
#include <ember/train/checkpoint.h>

namespace ember::fuzz {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

[[noreturn]] void finding(const std::string& what) { throw Finding(what); }

// Runs `parse`; an ember::Error is a rejection (returns its message), any other exception a
// finding; "" when the input was accepted.
template <typename F>
std::string rejection(const char* target, F parse) {
  const auto t0 = Clock::now();
  std::string why;
  try {
    parse();
  } catch (const Error& e) {
    why = e.what();
    if (why.empty()) why = "(an empty message)";
  } catch (const Finding&) {
    throw;
  } catch (const std::exception& e) {
    finding(std::string(target) + ": an exception other than ember::Error escaped: " + e.what());
  } catch (...) {
    finding(std::string(target) + ": an exception of unknown type escaped");
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (seconds > kSlowInputSeconds) finding(std::string(target) + ": one input took " + std::to_string(seconds) + " s");
  return why;
}

bool same_tensors(const io::SafetensorsFile& a, const io::SafetensorsFile& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    if (a.tensors[i].first != b.tensors[i].first || x.dtype() != y.dtype() || x.shape() != y.shape() ||
        std::memcmp(x.data(), y.data(), static_cast<size_t>(x.nbytes())) != 0)
      return false;
  }
  return true;
}

std::vector<uint8_t> with_length(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  bytes += header;
  bytes += data;
  return {bytes.begin(), bytes.end()};
}

json file_ref(const std::string& path, uint64_t bytes) {
  return json{{"path", path}, {"bytes", bytes}, {"crc32", "crc32:0badc0de"}};
}

}  // namespace

std::string safetensors_one(std::span<const uint8_t> bytes) {
  io::SafetensorsFile f;
  const std::string why = rejection("safetensors", [&] { f = io::parse_safetensors(bytes, "fuzz.safetensors"); });
  if (!why.empty()) return why;
  // The header length is valid once accepted: the tensors fill the data section exactly.
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | bytes[static_cast<size_t>(i)];
  uint64_t total = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : f.tensors) {
    total += static_cast<uint64_t>(t.nbytes());
    if (!names.insert(name).second) finding("safetensors: accepted a duplicate name '" + name + "'");
    // Zero-size tensors are left out: core's is_contiguous() is false for a shape such as (0, 0)
    // (its strides skip empty dims, its check does not), which says nothing about the parser.
    if ((t.numel() > 0 && !t.is_contiguous()) || !t.device().is_cpu() || t.nbytes() != t.numel() * dtype_size(t.dtype()))
      finding("safetensors: tensor '" + name + "' is not a contiguous CPU tensor of its shape");
    if (t.dtype() == DType::boolean)
      for (int64_t i = 0; i < t.numel(); ++i)
        if (static_cast<const uint8_t*>(t.data())[i] > 1) finding("safetensors: BOOL byte other than 0 or 1");
  }
  if (total != bytes.size() - 8 - header) finding("safetensors: the tensors do not fill the data section");
  io::SafetensorsFile again;
  if (!rejection("safetensors", [&] { again = io::parse_safetensors(bytes, "fuzz.safetensors"); }).empty() ||
      !same_tensors(f, again))
    finding("safetensors: a second parse of the same bytes differs");
  return "";
}

std::string manifest_one(std::span<const uint8_t> bytes) {
  train::Manifest m;
  const std::string why = rejection("manifest", [&] { m = train::parse_manifest(bytes, "fuzz/checkpoint.json"); });
  if (!why.empty()) return why;
  for (const train::FileRef* f : {&m.weights, &m.state, m.has_best ? &m.best : nullptr}) {
    if (f == nullptr) continue;
    const std::filesystem::path p(f->path);
    if (f->path.empty() || p.is_absolute()) finding("manifest: accepted the file name '" + f->path + "'");
    for (const auto& part : p)
      if (part == "..") finding("manifest: accepted a name that leaves the directory: '" + f->path + "'");
  }
  if (m.step < 0 || m.epoch < 0) finding("manifest: accepted a negative step or epoch");
  train::Manifest again;
  if (!rejection("manifest", [&] { again = train::parse_manifest(bytes, "fuzz/checkpoint.json"); }).empty() ||
      again.run != m.run || again.step != m.step || again.weights.path != m.weights.path ||
      again.split.has_value() != m.split.has_value())
    finding("manifest: a second parse of the same bytes differs");
  return "";
}

std::vector<std::vector<uint8_t>> safetensors_seeds() {
  std::vector<std::vector<uint8_t>> out;
  // What ember writes: metadata first, then the entries, the data widest dtype first, padded.
  {
    json meta = {{"format", "pt"}, {"ember.model", "cnn"}, {"ember.classes", "[\"a\",\"b\"]"}};
    std::string h = "{\"__metadata__\":" + meta.dump();
    std::string data;
    auto add = [&](const char* name, const char* dtype, std::vector<uint64_t> shape, size_t nbytes, char fill) {
      const uint64_t at = data.size();
      data.append(nbytes, fill);
      h += ",\"" + std::string(name) + "\":" +
           json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {at, at + nbytes}}}.dump();
    };
    add("conv1.weight", "F32", {2, 1, 3, 3}, 72, '\x01');
    add("fc.bias", "F64", {2}, 16, '\x02');
    add("bn.num_batches_tracked", "I64", {}, 8, '\0');
    add("half", "F16", {3}, 6, '\x03');
    add("brain", "BF16", {1, 1}, 2, '\x04');
    add("ints", "I32", {2}, 8, '\x05');
    add("bytes", "U8", {5}, 5, '\x06');
    add("mask", "BOOL", {3}, 3, '\x01');
    add("empty", "F32", {0, 4}, 0, '\0');
    h += "}";
    h.append((8 - h.size() % 8) % 8, ' ');
    out.push_back(with_length(h, data));
  }
  // The reference writer's order (sorted by dtype and name, offsets not in header order).
  out.push_back(with_length(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                            std::string("\0\0\x80\x3f\0\0\0\x40", 8)));
  out.push_back(with_length("{}", ""));
  out.push_back(with_length(R"({"__metadata__":{}})", ""));
  return out;
}

std::vector<std::vector<uint8_t>> manifest_seeds() {
  // What CheckpointWriter writes (train/checkpoint.cpp), with and without a best pointer and a
  // held-out split, and a manifest from before the split was recorded.
  json m{{"format", "ember.checkpoint.v1"},
         {"run", "0123456789abcdef"},
         {"step", 16},
         {"epoch", 2},
         {"model", "cnn"},
         {"data", "photos"},
         {"data_dir", ""},
         {"val", ""},
         {"amp", "off"},
         {"weights", file_ref("step-00000016/model.safetensors", 1234)},
         {"state", file_ref("step-00000016/state.safetensors", 5678)},
         {"best", nullptr},
         {"split", nullptr}};
  std::vector<std::vector<uint8_t>> out;
  auto add = [&](const json& j) {
    const std::string s = j.dump(1) + "\n";
    out.emplace_back(s.begin(), s.end());
  };
  add(m);
  json best = m;
  best["best"] = json{{"step", 8}, {"test_acc", 0.875}, {"weights", file_ref("step-00000008/model.safetensors", 99)}};
  best["split"] = json{{"data", "/data/photos"}, {"fraction", 0.1},       {"seed", 1},
                       {"samples", 240},         {"held_out", 24},        {"samples_hash", "fnv1a64:0123456789abcdef"}};
  add(best);
  json old = m;
  old.erase("split");
  old.erase("amp");
  add(old);
  return out;
}

}  // namespace ember::fuzz
