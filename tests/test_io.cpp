// Checkpoint I/O: atomic writes, safetensors (exact bytes, round trips, every validation error),
// the training-state file and its checksum.

#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ember/ember.h>
#include <ember/io/atomic_file.h>
#include <ember/io/safetensors.h>
#include <ember/io/training_state.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <unistd.h>

using namespace ember;
using namespace ember::io;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case, removed afterwards.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("ember_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Plain (non-atomic) writes and reads, so the tests do not depend on the code under test.
void write_raw(const std::string& path, const std::string& bytes) {
  // Remove, then create: ext4 flushes a file truncated and rewritten in place to disk on close
  // (auto_da_alloc), which made the many rewrites below take seconds.
  fs::remove(path);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}
std::string read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
// A safetensors file from a header (not padded) and a data section.
std::string st_bytes(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data()), static_cast<size_t>(c.nbytes()));
}
// Same dtype, shape and bytes.
void check_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.device().is_cpu());
  CHECK(tensor_bytes(got) == tensor_bytes(want));
}

constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min(), kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min(), kI64Max = std::numeric_limits<int64_t>::max();

// One tensor of every dtype, plus a 0-dim and a zero-size one.
std::vector<std::pair<std::string, Tensor>> every_dtype() {
  const Tensor base = from_vector<float>({0.5f, -1.5f, 3.0f, 65504.0f, 1e-3f, 0.0f}, {2, 3});
  return {
      {"conv1.weight", base},
      {"f64", from_vector<double>({1.0 / 3.0, -2.5, 1e300}, {3})},
      {"f16", base.to(DType::f16)},
      {"bf16", base.to(DType::bf16)},
      {"i32", from_vector<int32_t>({kI32Min, -1, 0, kI32Max}, {2, 2})},
      {"i64", from_vector<int64_t>({kI64Min, 7, kI64Max}, {3, 1})},
      {"u8", from_vector<uint8_t>({0, 1, 128, 255}, {4})},
      {"bool", from_vector<float>({1, 0, 0, 1, 1}, {5}).to(DType::boolean)},
      {"scalar", scalar_tensor(42.0, {.dtype = DType::f64})},
      {"empty", empty({0, 3}, {.dtype = DType::f32})},
  };
}

}  // namespace

// ---- atomic files -----------------------------------------------------------------------------

TEST_CASE("atomic write replaces the file, a writer that throws leaves the old file and no temp file", "[io]") {
  TempDir tmp;
  const std::string path = tmp.path("ckpt.bin");
  write_file_atomic(path, std::string_view("first version"));
  CHECK(read_raw(path) == "first version");
  write_file_atomic(path, std::string_view("second"));
  CHECK(read_raw(path) == "second");

  auto half_then_throw = [](FileWriter& w) {
    w.write(std::string_view("a partial new checkpoint"));
    CHECK(w.bytes_written() == 24);
    throw std::runtime_error("simulated crash halfway");
  };
  CHECK_THROWS_WITH(write_file_atomic(path, half_then_throw), "simulated crash halfway");
  CHECK(read_raw(path) == "second");
  CHECK(tmp.files() == std::vector<std::string>{"ckpt.bin"});

  // A big write that bypasses the buffer, then a throw: same guarantee.
  std::string big(1 << 20, 'x');
  CHECK_THROWS(write_file_atomic(path, [&](FileWriter& w) {
    w.write(big);
    throw Error("out of something");
  }));
  CHECK(read_raw(path) == "second");
  CHECK(tmp.files() == std::vector<std::string>{"ckpt.bin"});

  const std::vector<uint8_t> bytes = {0, 1, 2, 255};
  write_file_atomic(path, bytes);  // a vector converts to the span overload
  CHECK(read_file(path) == bytes);
}

TEST_CASE("atomic write and read_file errors name the path and the reason", "[io]") {
  TempDir tmp;
  const std::string in_missing_dir = tmp.path("no_such_dir/model.safetensors");
  CHECK_THROWS_WITH(write_file_atomic(in_missing_dir, std::string_view("x")),
                    Contains(in_missing_dir) && Contains("No such file or directory"));
  // A directory is refused before anything is written (io/atomic_file.h): no temp file either.
  fs::create_directories(tmp.path("a_directory"));
  CHECK_THROWS_WITH(write_file_atomic(tmp.path("a_directory"), std::string_view("x")),
                    Contains(tmp.path("a_directory")) && Contains("is a directory"));
  CHECK(tmp.files() == std::vector<std::string>{"a_directory"});

  CHECK_THROWS_WITH(read_file(tmp.path("missing.bin")), Contains(tmp.path("missing.bin")) && Contains("no such file"));
  CHECK_THROWS_WITH(read_file(tmp.path("a_directory")),
                    Contains(tmp.path("a_directory")) && Contains("is a directory"));
  CHECK_THROWS_WITH(load_safetensors(tmp.path("missing.safetensors")),
                    Contains(tmp.path("missing.safetensors")) && Contains("no such file"));
}

// ---- safetensors: exact bytes -----------------------------------------------------------------

TEST_CASE("safetensors: ember writes and reads the exact bytes of the reference format", "[io]") {
  TempDir tmp;
  // One F32 tensor "a" = [1, 2]: the bytes safetensors.numpy.save({"a": np.array([1, 2], np.float32)})
  // produces. Header: 54 bytes of JSON + 2 spaces of padding = 56 = 0x38, so the data starts at 64.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(header.size() == 54);
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + header + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  const std::string path = tmp.path("a.safetensors");
  save_safetensors(path, {{"a", from_vector<float>({1, 2})}});
  CHECK(read_raw(path) == expected);

  const std::string hand = tmp.path("hand.safetensors");
  write_raw(hand, expected);
  const SafetensorsFile f = load_safetensors(hand);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].first == "a");
  CHECK(f.at("a").to_vector<float>() == std::vector<float>{1, 2});
  CHECK(f.metadata.empty());

  // No tensors, with and without metadata: the reference implementation's own test vectors
  // (safetensors/src/tensor.rs test_empty).
  save_safetensors(path, {});
  CHECK(read_raw(path) == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  save_safetensors(path, {}, {{"framework", "pt"}});
  CHECK(read_raw(path) == std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  const SafetensorsFile m = load_safetensors(path);
  CHECK(m.tensors.empty());
  CHECK(m.metadata == std::map<std::string, std::string>{{"framework", "pt"}});
}

TEST_CASE("safetensors: header in the caller's order, data widest dtype first so every tensor is aligned", "[io]") {
  TempDir tmp;
  const std::string path = tmp.path("mixed.safetensors");
  // PyTorch BatchNorm order: an odd-sized f32 would leave num_batches_tracked (i64) misaligned.
  save_safetensors(path, {{"bn.weight", from_vector<float>({1, 2, 3})},
                          {"bn.num_batches_tracked", scalar_tensor(5, {.dtype = DType::i64})},
                          {"mask", from_vector<uint8_t>({7})},
                          {"half", from_vector<float>({1}).to(DType::f16)}});
  const std::string header = R"({"bn.weight":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},)"
                             R"("bn.num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("mask":{"dtype":"U8","shape":[1],"data_offsets":[22,23]},)"
                             R"("half":{"dtype":"F16","shape":[1],"data_offsets":[20,22]}})";
  const std::string raw = read_raw(path);
  REQUIRE(raw.size() >= 8 + header.size());
  CHECK(raw.substr(8, header.size()) == header);
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.names() == std::vector<std::string>{"bn.weight", "bn.num_batches_tracked", "mask", "half"});
  CHECK(f.at("bn.num_batches_tracked").item() == 5.0);
  CHECK(f.at("bn.weight").to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(f.at("mask").to_vector<int64_t>() == std::vector<int64_t>{7});
  CHECK(f.at("half").item() == 1.0);
}

TEST_CASE("safetensors: reads files whose header order, offsets order and spacing differ", "[io]") {
  TempDir tmp;
  // As PyTorch's writer does: data sorted by dtype size, not by name; pretty-printed JSON.
  const std::string header = "{\n  \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [8, 10]},\n"
                             "  \"__metadata__\": {\"format\": \"pt\"},\n"
                             "  \"a\": {\"shape\": [1], \"data_offsets\": [0, 8], \"dtype\": \"F64\"}\n}   ";
  const std::string path = tmp.path("sorted.safetensors");
  write_raw(path, st_bytes(header, std::string("\0\0\0\0\0\0\xf0\x3f", 8) + "\x07\x09"));
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.names() == std::vector<std::string>{"b", "a"});  // header order
  CHECK(f.at("a").to_vector<double>() == std::vector<double>{1.0});
  CHECK(f.at("b").to_vector<int64_t>() == std::vector<int64_t>{7, 9});
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.contains("a"));
  CHECK_FALSE(f.contains("c"));
  CHECK_THROWS_WITH(f.at("c"), Contains(path) && Contains("no tensor named 'c'"));
}

// ---- safetensors: round trips -----------------------------------------------------------------

TEST_CASE("safetensors: round trip of every dtype, a 0-dim and a zero-size tensor, and metadata", "[io]") {
  TempDir tmp;
  const auto tensors = every_dtype();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode ✓ and \"quotes\""}};
  const std::string path = tmp.path("all.safetensors");
  save_safetensors(path, tensors, metadata);
  // The data section starts 8-byte aligned.
  const std::string raw = read_raw(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  CHECK((8 + n) % 8 == 0);

  const SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(f.tensors[i].first == tensors[i].first);  // order kept
    check_same(f.tensors[i].second, tensors[i].second);
  }
  CHECK(f.metadata == metadata);
  CHECK(f.at("bool").to_vector<float>() == std::vector<float>{1, 0, 0, 1, 1});
  CHECK(f.at("scalar").dim() == 0);
  CHECK(f.at("scalar").item() == 42.0);
  CHECK(f.at("empty").shape() == Shape{0, 3});
}

TEST_CASE("safetensors: non-contiguous tensors are written contiguously", "[io]") {
  TempDir tmp;
  const Tensor base = arange(12, {.dtype = DType::f32}).reshape({3, 4});
  const Tensor transposed = base.t();                       // (4, 3), strides (1, 4)
  const Tensor strided = base.slice(1, 0, 4, 2);            // (3, 2), every other column
  const Tensor expanded = from_vector<double>({1, 2}).expand({3, 2});  // stride 0
  const Tensor offset_view = base.select(0, 2);             // contiguous, storage offset 8
  REQUIRE_FALSE(transposed.is_contiguous());
  const Tensor leaf = ones({2}).requires_grad_();
  const std::string path = tmp.path("views.safetensors");
  save_safetensors(path, {{"t", transposed}, {"s", strided}, {"e", expanded}, {"o", offset_view}, {"leaf", leaf}});
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.at("t").shape() == Shape{4, 3});
  CHECK(f.at("t").to_vector<float>() == transposed.to_vector<float>());
  CHECK(f.at("s").to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  CHECK(f.at("e").to_vector<double>() == std::vector<double>{1, 2, 1, 2, 1, 2});
  CHECK(f.at("o").to_vector<float>() == std::vector<float>{8, 9, 10, 11});
  CHECK_FALSE(f.at("leaf").requires_grad());
}

TEST_CASE("safetensors: save rejects duplicate, reserved and undefined entries", "[io]") {
  TempDir tmp;
  const std::string path = tmp.path("bad.safetensors");
  CHECK_THROWS_WITH(save_safetensors(path, {{"w", ones({1})}, {"w", ones({1})}}),
                    Contains(path) && Contains("'w' appears more than once"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", ones({1})}}), Contains(path) && Contains("reserved"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"w", Tensor()}}), Contains(path) && Contains("'w' is undefined"));
  CHECK_THROWS_WITH(save_safetensors(path, {{std::string("bad\xff"), ones({1})}}), Contains(path) && Contains("UTF-8"));
  CHECK(tmp.files().empty());
}

// ---- safetensors: validation ------------------------------------------------------------------

TEST_CASE("safetensors: truncated or garbled files are rejected with the path and the problem", "[io]") {
  TempDir tmp;
  const std::string good_path = tmp.path("good.safetensors");
  save_safetensors(good_path, every_dtype());
  const std::string good = read_raw(good_path);
  const std::string path = tmp.path("bad.safetensors");
  auto load_error = [&](const std::string& bytes) -> std::string {
    write_raw(path, bytes);
    try {
      load_safetensors(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto rejects = [&](const std::string& bytes, const std::string& problem) {
    const std::string msg = load_error(bytes);
    INFO(msg);
    CHECK(msg.rfind(path + ": ", 0) == 0);  // starts with "<path>: "
    CHECK_THAT(msg, Contains(problem));
  };
  const std::string a8 = std::string(8, '\x01');  // 8 data bytes
  auto one = [](const std::string& fields) { return "{\"a\":{" + fields + "}}"; };

  SECTION("short, truncated, garbled length") {
    rejects("", "too short");
    rejects(good.substr(0, 5), "too short");
    rejects(good.substr(0, good.size() - 1), "run past the end of the data section");
    rejects(good.substr(0, 40), "runs past the end of the file");
    rejects(le64(~0ull) + good.substr(8), "over the 100000000-byte limit");
    rejects(le64(200'000'000) + good.substr(8), "over the 100000000-byte limit");
    rejects(le64(0) + good.substr(8), "too small");
  }
  SECTION("header that is not a JSON object") {
    rejects(st_bytes("[1, 2, 3]", ""), "does not start with '{'");
    rejects(st_bytes(R"({"a":{"dtype":"F32",)", a8), "not valid JSON");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])") + " trailing", a8), "not valid JSON");
    rejects(st_bytes(R"({"a":1})", ""), "tensor 'a': expected an object");
    rejects(st_bytes(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", a8), "nested 3 levels deep");
    rejects(st_bytes("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", ""), "nested");
    rejects(st_bytes(std::string("{}\0\0", 4), ""), "NUL byte");
    rejects(st_bytes(R"({"a":[1,2]})", ""), "tensor 'a': expected an object");
  }
  SECTION("missing or invalid fields") {
    rejects(st_bytes(one(R"("shape":[2],"data_offsets":[0,8])"), a8), "tensor 'a': missing \"dtype\"");
    rejects(st_bytes(one(R"("dtype":"F32","data_offsets":[0,8])"), a8), "tensor 'a': missing \"shape\"");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2])"), a8), "tensor 'a': missing \"data_offsets\"");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"), a8), "non-negative integers");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])"), a8), "non-negative integers");
    rejects(st_bytes(one(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), a8), "\"shape\" must be an array");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2],"data_offsets":[0])"), a8), "must be [begin, end]");
    rejects(st_bytes(one(R"("dtype":32,"shape":[2],"data_offsets":[0,8])"), a8), "\"dtype\" must be a string");
    rejects(st_bytes(one(R"("dtype":"F7","shape":[2],"data_offsets":[0,8])"), a8), "unknown dtype 'F7'");
    rejects(st_bytes(one(R"("dtype":"I8","shape":[8],"data_offsets":[0,8])"), a8), "ember has no such dtype");
    rejects(st_bytes(one(R"("dtype":"U8","shape":[1,1,1,1,1,1,1,1,8],"data_offsets":[0,8])"), a8), "at most 8");
    rejects(st_bytes(one(R"("dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8])"), a8), "too large");
    rejects(st_bytes(R"({"__metadata__":{"epoch":3}})", ""), "value for 'epoch' must be a string");
    rejects(st_bytes(R"({"__metadata__":"pt"})", ""), "\"__metadata__\" must be an object");
    // A NUL in a name or a dtype does not cut the message short.
    rejects(st_bytes(R"({"a\u0000b":{"dtype":"F\u000032","shape":[2],"data_offsets":[0,8]}})", a8),
            "tensor 'a\\0b': unknown dtype 'F\\032' (supported: F32,");
  }
  SECTION("offsets and sizes") {
    rejects(st_bytes(one(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"), a8),
            "tensor 'a': data_offsets [0, 8] hold 8 bytes but shape (3,) of F32 needs 12 bytes");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), a8), "end before they begin");
    rejects(st_bytes(one(R"("dtype":"F32","shape":[2],"data_offsets":[8,16])"), a8),
            "tensor 'a': data_offsets [8, 16] run past the end of the data section (8 bytes)");
    rejects(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     a8),
            "overlap tensor 'a' [0, 8]");
    rejects(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", a8),
            "bytes [0, 4) of the data section belong to no tensor");
    rejects(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", a8), "trailing bytes");
    rejects(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     a8),
            "names 'a' more than once");
    rejects(st_bytes(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
            "BOOL element 1 is byte 2");
  }
  SECTION("the same headers with correct sizes load (the checks are not over-eager)") {
    CHECK(load_error(st_bytes(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), a8)) == "(no error)");
    CHECK(load_error(st_bytes(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                              a8)) == "(no error)");
  }
}

TEST_CASE("safetensors: every truncation and every corrupted header byte is an ember::Error, never a crash", "[io]") {
  TempDir tmp;
  const std::string good_path = tmp.path("good.safetensors");
  const Tensor mask = from_vector<float>({1, 0}).to(DType::boolean);
  save_safetensors(good_path, {{"w", from_vector<float>({1, 2, 3}, {3})}, {"m", mask}}, {{"format", "pt"}});
  const std::string good = read_raw(good_path);
  const std::string path = tmp.path("bad.safetensors");
  for (size_t len = 0; len < good.size(); ++len) {
    INFO("truncated to " << len << " bytes");
    write_raw(path, good.substr(0, len));
    CHECK_THROWS_AS(load_safetensors(path), Error);
  }
  // Each byte of the length and the header replaced by a few values: either still a valid file
  // (e.g. a space turned into a tab) or an ember::Error; never another exception or a crash.
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  int rejected = 0;
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (char c : {'\0', '\t', '"', '{', '9', '\xff'}) {
      if (good[i] == c) continue;
      std::string bytes = good;
      bytes[i] = c;
      write_raw(path, bytes);
      INFO("byte " << i << " set to " << int(c));
      try {
        load_safetensors(path);
      } catch (const Error& e) {
        CHECK_THAT(e.what(), Contains(path));
        ++rejected;
      }
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("safetensors: a header of 120,000 entries parses in linear time, and from memory the same", "[io]") {
  // Note [Linear header parsing]: the quadratic parser took 35 s for 80,000 entries (about 80 s
  // for these 120,000); the linear one takes a fraction of a second on one core.
  constexpr int kEntries = 120'000;
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (int i = 0; i < kEntries; ++i) {
    const uint64_t at = data.size();
    const bool one = i % 1000 == 0;  // every thousandth entry holds one f32, the rest none
    header += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[" + (one ? "1" : "0") +
              "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + (one ? 4 : 0)) + "]}";
    if (one) data += std::string("\0\0\x80\x3f", 4);  // 1.0f
  }
  header += "}";
  const std::string bytes = st_bytes(header, data);
  TempDir tmp;
  const std::string path = tmp.path("many.safetensors");
  write_raw(path, bytes);
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = load_safetensors(path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(f.tensors.size() == static_cast<size_t>(kEntries));
  CHECK(f.tensors[0].first == "t0");  // header order
  CHECK(f.tensors[kEntries - 1].first == "t" + std::to_string(kEntries - 1));
  CHECK(f.tensors[1000].second.item() == 1.0);
  CHECK(f.tensors[1001].second.numel() == 0);
  CHECK(f.metadata.at("format") == "pt");
  // A bound far below the quadratic parser's minutes and far above the linear one's time, so a
  // loaded CI machine does not fail it (the measured time is in the test's output).
  INFO("parsed " << kEntries << " entries in " << seconds << " s");
  CHECK(seconds < 5.0);
  WARN("safetensors: " << kEntries << " header entries parsed in " << seconds << " s");

  // parse_safetensors reads the same bytes from memory: the same tensors, and the same errors.
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const SafetensorsFile m = parse_safetensors(std::span<const uint8_t>(p, bytes.size()), "in-memory");
  CHECK(m.tensors.size() == f.tensors.size());
  CHECK(m.tensors[1000].second.item() == 1.0);
  CHECK_THROWS_WITH(parse_safetensors(std::span<const uint8_t>(p, bytes.size() - 1), "in-memory"),
                    StartsWith("in-memory: ") && Contains("run past the end of the data section"));
}

TEST_CASE("readers refuse FIFOs, devices and sockets without opening them, and cap sizes", "[io]") {
  TempDir tmp;
  const std::string fifo = tmp.path("pipe.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // open() of a FIFO blocks until a writer comes: these return at once with an error instead.
  CHECK_THROWS_WITH(read_file(fifo), Equals(fifo + ": is a FIFO (named pipe), not a regular file; ember reads "
                                           "regular files only"));
  CHECK_THROWS_WITH(load_safetensors(fifo), StartsWith(fifo + ": is a FIFO (named pipe)"));
  CHECK_THROWS_WITH(check_regular_file(fifo), StartsWith(fifo + ": is a FIFO (named pipe)"));
  // A symlink to /dev/zero (which never ends) is judged by what it points to.
  const std::string zero = tmp.path("zero.safetensors");
  fs::create_symlink("/dev/zero", zero);
  CHECK_THROWS_WITH(load_safetensors(zero), Equals(zero + ": is a character device, not a regular file; ember reads "
                                                   "regular files only"));
  CHECK_THROWS_WITH(FileReader(tmp.path("nothing")), Equals(tmp.path("nothing") + ": no such file"));
  // The size cap is checked before anything is read or allocated (a sparse 5 GB file).
  const std::string big = tmp.path("big.json");
  { std::ofstream(big).put('x'); }
  fs::resize_file(big, uint64_t{5} << 30);
  CHECK_THROWS_WITH(read_file(big, 1 << 20, "a checkpoint manifest"),
                    Equals(big + ": 5368709120 bytes is more than the 1048576-byte limit for a checkpoint manifest "
                                 "(docs/data.md, \"Limits\"): the file is not what its name says, or damaged"));
}

// ---- training state ---------------------------------------------------------------------------

namespace {

TrainingState sample_state() {
  TrainingState s;
  s.model_name = "simple_cnn";
  s.model_config = {{"num_classes", "10"}, {"in_channels", "3"}, {"width", "32"}};
  s.class_names = {"cat", "dog", "tröpfchen"};
  s.epoch = 3;
  s.step = 1234;
  s.rng = {0x853c49e6748fea9bULL, 987654321};
  s.loader = {3, 17, 0xfeedfacecafebeefULL};
  s.optimizer.name = "Adam";
  // Named as optim::Optimizer::state_dict() names them; parameter 2 has no state yet.
  for (int64_t p : {0, 1, 3}) {
    const std::string prefix = "state." + std::to_string(p) + ".";
    s.optimizer.tensors.emplace_back(prefix + "exp_avg", full({2, 3}, 0.1 * double(p + 1)));
    s.optimizer.tensors.emplace_back(prefix + "exp_avg_sq",
                                     arange(6, {.dtype = DType::f32}).reshape({3, 2}).t());  // non-contiguous
    s.optimizer.scalars[prefix + "step"] = 1234.0;
  }
  s.optimizer.tensors.emplace_back("state.1.max_exp_avg_sq", scalar_tensor(7.0, {.dtype = DType::f64}));
  s.optimizer.scalars.merge(StateDict{{"param_groups.0.lr", 1e-3},
                                      {"param_groups.0.betas", std::vector<double>{0.9, 0.999}},
                                      {"param_groups.0.amsgrad", false},
                                      {"param_groups.0.name", std::string("backbone")},
                                      {"param_groups.1.lr", 1.0},
                                      {"param_groups.1.betas", std::vector<double>{}},
                                      {"param_groups.1.num_params", int64_t{2}}});
  s.scheduler.name = "StepLR";
  s.scheduler.values = state_dict_from({{"step_size", 30}, {"gamma", 0.1}, {"last_epoch", 3}, {"base_lrs.0", 1e-3}});
  s.extra = {{"best_accuracy", 0.9125},
             {"best_loss", std::numeric_limits<double>::infinity()},
             {"nan_seen", std::numeric_limits<double>::quiet_NaN()},
             {"odd_list", std::vector<double>{-std::numeric_limits<double>::infinity(), 2.5}},
             {"git", std::string("abc123")},
             {"big", std::numeric_limits<int64_t>::min()}};
  s.extra_tensors.emplace_back("ema.fc.weight", from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::bf16));
  return s;
}

bool same_value(const StateValue& a, const StateValue& b) {
  if (a.index() != b.index()) return false;
  auto same_double = [](double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
  if (const double* x = std::get_if<double>(&a)) return same_double(*x, std::get<double>(b));
  if (const auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    if (x->size() != y.size()) return false;
    for (size_t i = 0; i < x->size(); ++i)
      if (!same_double((*x)[i], y[i])) return false;
    return true;
  }
  return a == b;
}
void check_same_dict(const StateDict& got, const StateDict& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [k, v] : want) {
    INFO(k);
    REQUIRE(got.count(k) == 1);
    CHECK(same_value(got.at(k), v));
  }
}

}  // namespace

TEST_CASE("training state: round trip of every field", "[io]") {
  TempDir tmp;
  const TrainingState s = sample_state();
  const std::string path = tmp.path("train_state.safetensors");
  save_training_state(path, s);
  const TrainingState r = load_training_state(path);
  CHECK(r.model_name == s.model_name);
  CHECK(r.model_config == s.model_config);
  CHECK(r.class_names == s.class_names);
  CHECK(r.epoch == 3);
  CHECK(r.step == 1234);
  CHECK(r.rng.seed == s.rng.seed);
  CHECK(r.rng.offset == s.rng.offset);
  CHECK(r.loader.epoch == 3);
  CHECK(r.loader.batch_index == 17);
  CHECK(r.loader.shuffle_seed == s.loader.shuffle_seed);
  CHECK(r.optimizer.name == "Adam");
  REQUIRE(r.optimizer.tensors.size() == s.optimizer.tensors.size());
  for (size_t i = 0; i < s.optimizer.tensors.size(); ++i) {
    INFO(s.optimizer.tensors[i].first);
    CHECK(r.optimizer.tensors[i].first == s.optimizer.tensors[i].first);  // order kept
    check_same(r.optimizer.tensors[i].second, s.optimizer.tensors[i].second);
  }
  check_same_dict(r.optimizer.scalars, s.optimizer.scalars);
  CHECK(r.scheduler.name == "StepLR");
  check_same_dict(r.scheduler.values, s.scheduler.values);
  check_same_dict(r.extra, s.extra);
  REQUIRE(r.extra_tensors.size() == 1);
  CHECK(r.extra_tensors[0].first == "ema.fc.weight");
  check_same(r.extra_tensors[0].second, s.extra_tensors[0].second);

  // Typed access; an int is accepted where a float is wanted; optim/'s plain doubles convert.
  const StateDict& o = r.optimizer.scalars;
  CHECK(state_get<double>(o, "param_groups.0.lr") == 1e-3);
  CHECK(state_get<std::vector<double>>(o, "param_groups.0.betas") == std::vector<double>{0.9, 0.999});
  CHECK(state_get<bool>(o, "param_groups.0.amsgrad") == false);
  CHECK(state_get<double>(o, "param_groups.1.num_params") == 2.0);
  CHECK_THROWS_WITH(state_get<double>(o, "momentum"), Contains("no key 'momentum'"));
  CHECK_THROWS_WITH(state_get<int64_t>(o, "param_groups.0.lr"), Contains("'param_groups.0.lr' does not hold an int"));
  CHECK(state_doubles(r.scheduler.values) ==
        std::map<std::string, double>{{"step_size", 30}, {"gamma", 0.1}, {"last_epoch", 3}, {"base_lrs.0", 1e-3}});
  CHECK_THROWS_WITH(state_doubles(o), Contains("does not hold a float"));

  // It is a plain safetensors file with PyTorch-style tensor names.
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.contains("optimizer.state.3.exp_avg_sq"));
  CHECK(f.contains("extra.ema.fc.weight"));
  CHECK(f.metadata.at("ember.format") == "ember.training_state.v1");

  // A default (empty) state round-trips too.
  save_training_state(path, TrainingState{});
  const TrainingState e = load_training_state(path);
  CHECK(e.optimizer.tensors.empty());
  CHECK(e.model_name.empty());
}

TEST_CASE("training state: a flipped byte or an edited field fails the checksum", "[io]") {
  TempDir tmp;
  const std::string path = tmp.path("state.safetensors");
  save_training_state(path, sample_state());
  const std::string good = read_raw(path);
  const std::string bad_path = tmp.path("tampered.safetensors");

  SECTION("a bit flip in the tensor data") {
    std::string bytes = good;
    bytes[bytes.size() - 3] ^= 0x10;
    write_raw(bad_path, bytes);
    CHECK_THROWS_WITH(load_training_state(bad_path), Contains(bad_path) && Contains("checksum mismatch"));
  }
  SECTION("an edited scalar in the JSON state") {
    std::string bytes = good;
    const size_t at = bytes.find(R"(\"step\":1234)");  // escaped: the state is a JSON string in __metadata__
    REQUIRE(at != std::string::npos);
    bytes.replace(at, 13, R"(\"step\":9234)");
    write_raw(bad_path, bytes);
    CHECK_THROWS_WITH(load_training_state(bad_path), Contains(bad_path) && Contains("checksum mismatch"));
  }
  SECTION("a truncated file") {
    write_raw(bad_path, good.substr(0, good.size() / 2));
    CHECK_THROWS_WITH(load_training_state(bad_path), Contains(bad_path));
  }
  SECTION("a weights file is not a training state") {
    save_safetensors(bad_path, {{"w", ones({2})}});
    CHECK_THROWS_WITH(load_training_state(bad_path),
                      Contains(bad_path) && Contains("not an ember training-state file"));
  }
  SECTION("the untouched file still loads") { CHECK(load_training_state(path).step == 1234); }
}

// ---- interop with the Python reference implementation -----------------------------------------
// Hidden test cases ("[.]"): tests/io/check_safetensors.py runs them, with EMBER_IO_INTEROP_DIR set,
// around its own reads and writes (ctest io:python_safetensors).

namespace {
std::string interop_dir() {
  const char* d = std::getenv("EMBER_IO_INTEROP_DIR");
  if (d == nullptr) FAIL("EMBER_IO_INTEROP_DIR is not set: run tests/io/check_safetensors.py");
  return d == nullptr ? std::string() : std::string(d);
}
// The values both sides know (kept in sync with check_safetensors.py).
std::vector<float> interop_f32() { return {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}; }
}  // namespace

TEST_CASE("io interop: ember writes the file Python checks", "[.][io_python]") {
  std::vector<std::pair<std::string, Tensor>> t = {
      {"f32", from_vector<float>(interop_f32(), {2, 3})},
      {"f64", from_vector<double>({1.0 / 3.0, -2.5, 1e300}, {3})},
      {"f16", from_vector<float>({0.5f, -1.5f, 65504.0f, std::ldexp(1.0f, -24)}, {2, 2}).to(DType::f16)},
      {"bf16", from_vector<float>({1.0f, -2.0f, 3.140625f}, {3}).to(DType::bf16)},
      {"i32", from_vector<int32_t>({kI32Min, -1, 0, kI32Max}, {2, 2})},
      {"i64", from_vector<int64_t>({kI64Min, kI64Max}, {2})},
      {"u8", from_vector<uint8_t>({0, 1, 128, 255}, {4})},
      {"bool", from_vector<float>({1, 0, 1}, {3}).to(DType::boolean)},
      {"scalar", scalar_tensor(42.0)},
      {"empty", empty({0, 3})},
      {"transposed", from_vector<float>(interop_f32(), {2, 3}).t()},
  };
  save_safetensors(interop_dir() + "/ember.safetensors", t, {{"format", "pt"}, {"writer", "ember"}});
}

TEST_CASE("io interop: ember reads the file Python wrote", "[.][io_python]") {
  const SafetensorsFile f = load_safetensors(interop_dir() + "/python.safetensors");
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "np"}, {"writer", "python"}});
  CHECK(f.tensors.size() == 10);
  check_same(f.at("f32"), from_vector<float>(interop_f32(), {2, 3}));
  check_same(f.at("f64"), from_vector<double>({1.0 / 3.0, -2.5, 1e300}, {3}));
  check_same(f.at("f16"), from_vector<float>({0.5f, -1.5f, 65504.0f, std::ldexp(1.0f, -24)}, {2, 2}).to(DType::f16));
  check_same(f.at("i32"), from_vector<int32_t>({kI32Min, -1, 0, kI32Max}, {2, 2}));
  check_same(f.at("i64"), from_vector<int64_t>({kI64Min, kI64Max}, {2}));
  check_same(f.at("u8"), from_vector<uint8_t>({0, 1, 128, 255}, {4}));
  check_same(f.at("bool"), from_vector<float>({1, 0, 1}, {3}).to(DType::boolean));
  check_same(f.at("scalar"), scalar_tensor(42.0));
  check_same(f.at("empty"), empty({0, 3}));
  check_same(f.at("transposed"), from_vector<float>(interop_f32(), {2, 3}).t().contiguous());
}
