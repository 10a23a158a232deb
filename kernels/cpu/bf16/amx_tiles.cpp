// AMX tiles: the hardware's configuration, and the scalar emulator (amx_tiles.h).
//
// Note [AMX tiles and their emulator]
// AMX adds eight tile registers of up to 16 rows x 64 bytes and a matrix unit that multiplies
// them. TDPBF16PS c, a, b reads tile a as M rows of K bf16 pairs and tile b as K rows of N bf16
// pairs (the pair layout VDPBF16PS also uses: both values of a pair lie along the sum), and adds
// to each float of c (M x N) the K pairs' dot product:
//     c[m][n] += sum over k of  a[m][k].lo * b[k][n].lo + a[m][k].hi * b[k][n].hi
// With full tiles (M = K = N = 16) that is 16 x 16 x 32 = 8192 multiply-adds per instruction,
// one every 16 cycles on Sapphire Rapids: 16 times the 32 of one VDPBF16PS per cycle.
//
// How the sum is rounded. Intel's pseudo-code (the SDM, TDPBF16PS) adds the products into c one
// at a time, k by k, with "round to nearest even ... each accumulation", input denormals read as
// zero and output denormals flushed. The hardware of this project's Intel machine (Xeon family 6
// model 207) does not round that way. Its results were compared with candidate models on millions
// of random sums (every tile shape, magnitudes from denormal to huge); this is the one that matches
// every sum bit for bit:
//     e = 0, o = 0                                  two float lanes, from zero
//     for k = 0 .. K-1:  e = fl(e + a[m][k].lo * b[k][n].lo)
//                        o = fl(o + a[m][k].hi * b[k][n].hi)
//     c[m][n] = fl(c[m][n] + fl(e + o))
// where each product is exact (two 8-bit significands; a product below float's normal range is
// kept exactly, not flushed), fl() rounds to nearest even and flushes a denormal result to zero
// (keeping its sign), and every input — the bf16 values and c itself — is read with denormals as
// zero. So one instruction sums its 16 even and its 16 odd products separately and adds them to
// c once: a blocked sum, 32 products per rounding into c. (The sequential model and a single
// rounding of the whole sum both disagree with the hardware on about half of random sums.)
// tests/test_amx_tiles.cpp holds the emulator to known answers of this model and, on a CPU with
// AMX, to the hardware, bit for bit. A NaN result is a NaN: the emulator computes with the
// machine's own float operations, so a NaN's payload follows the compiler's operand order, which
// the tests do not pin down.
//
// The emulator keeps each thread's tiles and configuration in thread_local storage, as a core
// keeps them per thread, and checks what the hardware checks before it computes: a configuration
// loaded, tile numbers in range, the three tiles of a TDPBF16PS distinct and of matching shapes
// (a's rows = c's rows, a's pairs = b's rows, b's bytes per row = c's). It runs the same kernels
// as the hardware (templates over amx_tiles.h's layer), so the bf16 GEMM's blocking, packing and
// edges are tested bit for bit against the hardware where there is AMX, and against a double
// reference on every CPU (tests/test_gemm_bf16.cpp). It is slow — scalar loops, orders of
// magnitude behind the hardware — and only runs when asked for (EMBER_CPU_AMX=emulate,
// set_amx_tiles), never as a measured candidate.

#include "amx_tiles.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../../../core/cpu/cpu_features.h"
#include "../../../core/error.h"

namespace ember::kernels::cpu {

namespace {

AmxTiles default_tiles() {
  const char* env = std::getenv("EMBER_CPU_AMX");
  const std::string v = env ? env : "";
  if (v == "emulate") return AmxTiles::emulated;
  if (v == "off" || v == "0") return AmxTiles::off;
  return amx_hardware_usable() ? AmxTiles::hardware : AmxTiles::off;
}

std::atomic<int>& chosen_tiles() {
  static std::atomic<int> tiles{static_cast<int>(default_tiles())};
  return tiles;
}

}  // namespace

bool amx_hardware_usable() {
  return EMBER_AMX_TILES && amx_tiles_status().permission == AmxPermission::granted;
}

AmxTiles amx_tiles() { return static_cast<AmxTiles>(chosen_tiles().load(std::memory_order_relaxed)); }

bool set_amx_tiles(AmxTiles tiles) {
  if (tiles == AmxTiles::hardware && !amx_hardware_usable()) return false;
  chosen_tiles().store(static_cast<int>(tiles), std::memory_order_relaxed);
  return true;
}

const char* amx_tiles_name(AmxTiles tiles) {
  switch (tiles) {
    case AmxTiles::off: return "off";
    case AmxTiles::hardware: return "hardware";
    case AmxTiles::emulated: return "emulated";
  }
  return "?";
}

std::string amx_description() {
  const AmxStatus& status = amx_tiles_status();
  switch (amx_tiles()) {
    case AmxTiles::hardware: return "hardware tiles (AMX-BF16; " + status.detail + ")";
    case AmxTiles::emulated: return "emulated tiles (EMBER_CPU_AMX=emulate or set_amx_tiles; the CPU: " + status.detail + ")";
    case AmxTiles::off: break;
  }
  if (status.permission == AmxPermission::granted) return "off (EMBER_CPU_AMX=off; the CPU: " + status.detail + ")";
  if (status.permission == AmxPermission::refused) return "off: the CPU has AMX but Linux " + status.detail;
  return "off: " + status.detail;
}

#if EMBER_AMX_TILES
// The 64-byte LDTILECFG block: palette, start row, 14 reserved bytes, 16 colsb (uint16), 16 rows.
void HardwareTiles::configure(const TileConfig& config) {
  alignas(64) uint8_t block[64] = {};
  block[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    const uint16_t colsb = static_cast<uint16_t>(config.tile[t].colsb);
    std::memcpy(block + 16 + 2 * t, &colsb, sizeof colsb);
    block[48 + t] = static_cast<uint8_t>(config.tile[t].rows);
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(block));
}
#endif

// ---- the emulator -------------------------------------------------------------------------------

namespace amx_emulator {

namespace {

struct Tiles {
  bool configured = false;
  TileConfig config;
  alignas(64) std::array<std::array<uint8_t, kTileRows * kTileRowBytes>, 8> data{};
};

thread_local Tiles tiles;
std::atomic<int64_t> dots{0};

const TileShape& shape_of(int t, const char* op) {
  EMBER_CHECK(tiles.configured, "AMX emulator: ", op, " before a tile configuration was loaded");
  EMBER_CHECK(t >= 0 && t < 8, "AMX emulator: ", op, " of tile ", t, " (tiles are 0..7)");
  const TileShape& s = tiles.config.tile[t];
  EMBER_CHECK(s.rows > 0 && s.colsb > 0, "AMX emulator: ", op, " of tile ", t, ", which the configuration leaves unused");
  return s;
}

// bf16 bits -> float, denormals as zero (TDPBF16PS's inputs).
float bf16_daz(uint16_t bits) {
  if ((bits & 0x7f80u) == 0) bits &= 0x8000u;  // zero exponent: +-0
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A float with a denormal flushed to a zero of its sign (the inputs' DAZ and the results' FTZ).
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// fl(s + p): s a float, p an exact product held in double; rounded once to float (p has at most
// 16 significant bits, so the double sum is exact or rounds below float's half unit: no double
// rounding), a denormal result flushed.
float add_exact(float s, double p) { return flush(static_cast<float>(static_cast<double>(s) + p)); }

}  // namespace

void load_config(const TileConfig& config) {
  for (int t = 0; t < 8; ++t) {
    const TileShape& s = config.tile[t];
    EMBER_CHECK(s.rows >= 0 && s.rows <= kTileRows && s.colsb >= 0 && s.colsb <= kTileRowBytes,
                "AMX emulator: tile ", t, " configured as ", s.rows, " rows of ", s.colsb,
                " bytes (at most 16 rows of 64 bytes)");
  }
  tiles.config = config;
  tiles.configured = true;
  for (auto& t : tiles.data) t.fill(0);  // LDTILECFG zeroes the tiles
}

void release() {
  tiles.configured = false;
  for (auto& t : tiles.data) t.fill(0);
}

void zero(int t) {
  shape_of(t, "TILEZERO");
  tiles.data[t].fill(0);
}

void load(int t, const void* base, int64_t stride) {
  const TileShape& s = shape_of(t, "TILELOADD");
  auto& d = tiles.data[t];
  d.fill(0);
  for (int r = 0; r < s.rows; ++r)
    std::memcpy(d.data() + r * kTileRowBytes, static_cast<const uint8_t*>(base) + r * stride, s.colsb);
}

void store(int t, void* base, int64_t stride) {
  const TileShape& s = shape_of(t, "TILESTORED");
  for (int r = 0; r < s.rows; ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, tiles.data[t].data() + r * kTileRowBytes, s.colsb);
}

void dpbf16ps(int c, int a, int b) {
  const TileShape &sc = shape_of(c, "TDPBF16PS"), &sa = shape_of(a, "TDPBF16PS"), &sb = shape_of(b, "TDPBF16PS");
  EMBER_CHECK(c != a && c != b && a != b, "AMX emulator: TDPBF16PS with tiles ", c, ", ", a, ", ", b,
              " (three distinct tiles)");
  EMBER_CHECK(sa.rows == sc.rows && sa.colsb == 4 * sb.rows && sb.colsb == sc.colsb && sc.colsb % 4 == 0 &&
                  sa.colsb % 4 == 0,
              "AMX emulator: TDPBF16PS shapes do not fit: c ", sc.rows, " x ", sc.colsb, " bytes, a ", sa.rows, " x ",
              sa.colsb, ", b ", sb.rows, " x ", sb.colsb);
  const int M = sc.rows, N = sc.colsb / 4, K = sa.colsb / 4;
  const uint8_t* ta = tiles.data[a].data();
  const uint8_t* tb = tiles.data[b].data();
  uint8_t* tc = tiles.data[c].data();
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float e = 0.0f, o = 0.0f;  // the even and odd products' lanes
      for (int k = 0; k < K; ++k) {
        uint16_t ap[2], bp[2];
        std::memcpy(ap, ta + m * kTileRowBytes + 4 * k, sizeof ap);
        std::memcpy(bp, tb + k * kTileRowBytes + 4 * n, sizeof bp);
        e = add_exact(e, static_cast<double>(bf16_daz(ap[0])) * bf16_daz(bp[0]));
        o = add_exact(o, static_cast<double>(bf16_daz(ap[1])) * bf16_daz(bp[1]));
      }
      float acc;
      std::memcpy(&acc, tc + m * kTileRowBytes + 4 * n, sizeof acc);
      acc = add_exact(flush(acc), static_cast<double>(flush(e + o)));
      std::memcpy(tc + m * kTileRowBytes + 4 * n, &acc, sizeof acc);
    }
  dots.fetch_add(1, std::memory_order_relaxed);
}

int64_t dot_products() { return dots.load(std::memory_order_relaxed); }

}  // namespace amx_emulator

}  // namespace ember::kernels::cpu
