// The AMX tile layer (kernels/cpu/bf16/amx_tiles.h, Note [AMX tiles and their emulator]): the
// emulator against known answers of the rounding model it implements (two lanes of products,
// exact products, denormals), its checks of what the hardware would fault on, and — on a CPU with
// AMX whose tiles Linux grants — the hardware against the emulator bit for bit on random tiles
// of every size, denormals and special values included. Each test says which tiles ran.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ember/kernels/cpu/bf16/amx_tiles.h>

#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;

namespace {

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);  // the values below are exact in bf16
}
uint32_t pair(float lo, float hi) { return bf16_bits(lo) | static_cast<uint32_t>(bf16_bits(hi)) << 16; }
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// One TDPBF16PS on the tiles of `Tiles`: c (M x N floats) += a (M x K pairs) . b (K x N pairs),
// every operand in a 16 x 16 buffer of 32-bit words (row stride 64 bytes).
struct Operands {
  int M = 16, N = 16, K = 16;
  std::vector<uint32_t> a = std::vector<uint32_t>(256), b = std::vector<uint32_t>(256);
  std::vector<float> c = std::vector<float>(256);
};

template <class Tiles>
std::vector<float> dot(const Operands& o) {
  kc::TileConfig config;
  config.tile[0] = {o.M, 4 * o.N};
  config.tile[1] = {o.M, 4 * o.K};
  config.tile[2] = {o.K, 4 * o.N};
  std::vector<float> c = o.c;
  Tiles::configure(config);
  Tiles::template load<0>(c.data(), 64);
  Tiles::template load<1>(o.a.data(), 64);
  Tiles::template load<2>(o.b.data(), 64);
  Tiles::template dot<0, 1, 2>();
  Tiles::template store<0>(c.data(), 64);
  Tiles::release();
  return c;
}

// The known answers of the model, each with one output element (0, 0).
struct Known {
  const char* what;
  Operands o;
  float want;
};

std::vector<Known> known_answers() {
  std::vector<Known> cases;
  {  // Two lanes: even products 2^-24 + 2^-24 = 2^-23 exactly, odd 1; then 1 + 2^-23. Adding the
     // products one at a time into 0 would round 1 + 2^-24 to 1 twice and give 1.
    Known k{"even and odd products summed apart", {}, 1.0f + std::ldexp(1.0f, -23)};
    k.o.a[0] = pair(std::ldexp(1.0f, -24), 1.0f);
    k.o.b[0] = pair(1.0f, 1.0f);
    k.o.a[1] = pair(std::ldexp(1.0f, -24), 0.0f);
    k.o.b[16] = pair(1.0f, 0.0f);
    cases.push_back(k);
  }
  {  // A product below float's normal range is kept exactly: 2^-125 + 2^-63 2^-77.
    Known k{"products exact below float's normal range", {}, std::ldexp(1.0f, -125) * (1.0f + std::ldexp(1.0f, -15))};
    k.o.a[0] = pair(std::ldexp(1.0f, -63), 0.0f);
    k.o.b[0] = pair(std::ldexp(1.0f, -62), 0.0f);
    k.o.a[1] = pair(std::ldexp(1.0f, -63), 0.0f);
    k.o.b[16] = pair(std::ldexp(1.0f, -77), 0.0f);
    cases.push_back(k);
  }
  {  // A denormal bf16 input reads as zero: 2^-130 x 2^100 would be 2^-30.
    Known k{"denormal bf16 input as zero", {}, 0.0f};
    k.o.a[0] = pair(std::ldexp(1.0f, -130), 0.0f);
    k.o.b[0] = pair(std::ldexp(1.0f, 100), 0.0f);
    cases.push_back(k);
  }
  {  // A denormal C reads as zero: 2^-130 + 0 gives 0.
    Known k{"denormal accumulator as zero", {}, 0.0f};
    k.o.c[0] = std::ldexp(1.0f, -130);
    cases.push_back(k);
  }
  {  // A denormal result is flushed: 2^-63 x 2^-64 = 2^-127.
    Known k{"denormal result flushed", {}, 0.0f};
    k.o.a[0] = pair(std::ldexp(1.0f, -63), 0.0f);
    k.o.b[0] = pair(std::ldexp(1.0f, -64), 0.0f);
    cases.push_back(k);
  }
  {  // Rounding to nearest even when the lanes meet C: 2^24 + (1 + 1) = 2^24 + 2 (one rounding of
     // the lanes' sum into C), where adding 1 twice would stay at 2^24.
    Known k{"the lanes' sum added to C once", {}, std::ldexp(1.0f, 24) + 2.0f};
    k.o.c[0] = std::ldexp(1.0f, 24);
    k.o.a[0] = pair(1.0f, 1.0f);
    k.o.b[0] = pair(1.0f, 1.0f);
    cases.push_back(k);
  }
  return cases;
}

// Random operands: M x K by K x N (partial tiles too), bf16 values over `exponents` binades from
// `lowest` (biased), C over a range scaled by 2^c_exp; with `specials`, some zeros, infinities and NaNs.
Operands random_operands(std::mt19937& rng, int M, int N, int K, int lowest, int exponents, int c_exp,
                         bool specials) {
  Operands o;
  o.M = M, o.N = N, o.K = K;
  auto value = [&]() -> uint16_t {
    const uint32_t r = rng();
    if (specials && r % 37 == 0) {
      const uint16_t s[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x0001};
      return s[(r >> 8) % 6];
    }
    return static_cast<uint16_t>((r & 0x807f) | (((r >> 16) % exponents + lowest) << 7));
  };
  for (int i = 0; i < 256; ++i) o.a[i] = value() | static_cast<uint32_t>(value()) << 16;
  for (int i = 0; i < 256; ++i) o.b[i] = value() | static_cast<uint32_t>(value()) << 16;
  std::uniform_real_distribution<float> u(-10.0f, 10.0f);
  for (float& x : o.c) x = std::ldexp(u(rng), c_exp);
  return o;
}

}  // namespace

TEST_CASE("AMX emulator: TDPBF16PS rounds as the documented model (known answers)", "[amx][bf16]") {
  for (const Known& k : known_answers()) {
    INFO(k.what);
    const std::vector<float> got = dot<kc::EmulatedTiles>(k.o);
    CHECK(bits_of(got[0]) == bits_of(k.want));
  }
}

TEST_CASE("AMX emulator: loads zero what they do not fill, and partial tiles multiply their shape", "[amx][bf16]") {
  // M = 3 rows, K = 2 pairs, N = 5 columns: every C value is sum over k of a_lo b_lo + a_hi b_hi,
  // small integers (exact); the values past the shape are not stored (they keep C's).
  Operands o;
  o.M = 3, o.K = 2, o.N = 5;
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k) o.a[m * 16 + k] = pair(float(m + k), float(1 + k));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) o.b[k * 16 + n] = pair(float(n), float(k + n));
  for (int i = 0; i < 256; ++i) o.c[i] = float(i % 7);
  const std::vector<float> got = dot<kc::EmulatedTiles>(o);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float want = o.c[m * 16 + n];
      if (m < o.M && n < o.N)
        for (int k = 0; k < o.K; ++k) want += float(m + k) * float(n) + float(1 + k) * float(k + n);
      INFO("m " << m << " n " << n);
      CHECK(got[m * 16 + n] == want);
    }
}

TEST_CASE("AMX emulator: faults where the hardware would", "[amx][bf16]") {
  namespace emu = kc::amx_emulator;
  std::vector<uint32_t> buf(256);
  emu::release();
  CHECK(testing::error_of([&] { emu::load(0, buf.data(), 64); }).find("before a tile configuration") !=
        std::string::npos);
  kc::TileConfig config;
  config.tile[0] = {16, 64};
  config.tile[1] = {16, 64};
  config.tile[2] = {8, 64};  // 8 pair rows: a's 16 pairs do not fit
  emu::load_config(config);
  CHECK(testing::error_of([&] { emu::dpbf16ps(0, 1, 2); }).find("shapes do not fit") != std::string::npos);
  CHECK(testing::error_of([&] { emu::dpbf16ps(0, 0, 1); }).find("distinct") != std::string::npos);
  CHECK(testing::error_of([&] { emu::zero(3); }).find("unused") != std::string::npos);
  CHECK(testing::error_of([&] { emu::store(8, buf.data(), 64); }).find("tiles are 0..7") != std::string::npos);
  config.tile[4] = {17, 64};
  CHECK(testing::error_of([&] { emu::load_config(config); }).find("at most 16 rows") != std::string::npos);
  emu::release();
  const int64_t before = emu::dot_products();
  config.tile[2] = {16, 64};
  config.tile[4] = {};
  emu::load_config(config);
  emu::dpbf16ps(0, 1, 2);
  emu::release();
  CHECK(emu::dot_products() == before + 1);
}

TEST_CASE("AMX hardware: the same bits as the emulator", "[amx][bf16]") {
#if EMBER_AMX_TILES
  if (!kc::amx_hardware_usable()) {
    WARN("no AMX tiles here (" << kc::amx_description() << "): only the emulator is tested");
    return;
  }
  WARN("comparing this CPU's AMX tiles with the emulator");
  for (const Known& k : known_answers()) {
    INFO(k.what);
    CHECK(bits_of(dot<kc::HardwareTiles>(k.o)[0]) == bits_of(k.want));
  }
  std::mt19937 rng(2024);
  struct Range {
    int lowest, exponents, c_exp;
    bool specials;
  };
  // Everyday magnitudes; a wide range with special values; tiny values whose products and sums
  // are denormal (flushes); C large against the products.
  const Range ranges[] = {{115, 24, 0, false}, {1, 253, 0, true}, {40, 30, -120, false}, {120, 10, 30, false}};
  const int shapes[][3] = {{16, 16, 16}, {1, 1, 1}, {5, 9, 7}, {16, 3, 16}, {11, 16, 2}};
  int64_t compared = 0, mismatched = 0;
  for (const Range& r : ranges)
    for (const auto& s : shapes)
      for (int trial = 0; trial < 40; ++trial) {
        const Operands o = random_operands(rng, s[0], s[1], s[2], r.lowest, r.exponents, r.c_exp, r.specials);
        const std::vector<float> hw = dot<kc::HardwareTiles>(o), emu = dot<kc::EmulatedTiles>(o);
        for (int i = 0; i < 256; ++i) {
          ++compared;
          const bool same = std::isnan(hw[i]) ? std::isnan(emu[i]) : bits_of(hw[i]) == bits_of(emu[i]);
          if (!same && mismatched++ < 5)
            FAIL_CHECK("shape " << s[0] << "x" << s[1] << "x" << s[2] << ", element " << i << ": hardware "
                                << hw[i] << " (0x" << std::hex << bits_of(hw[i]) << "), emulator " << emu[i]
                                << " (0x" << bits_of(emu[i]) << std::dec << ")");
        }
      }
  INFO(compared << " values compared");
  CHECK(mismatched == 0);
#else
  WARN("not an x86-64 build: no AMX tiles");
#endif
}
