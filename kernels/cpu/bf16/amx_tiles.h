#pragma once
// AMX tiles behind one thin layer, internal to kernels/cpu: the five tile operations the bf16
// kernels use (configure, zero, load, store, TDPBF16PS), written once for the hardware and once
// for a scalar emulator with the same results bit for bit (Note [AMX tiles and their emulator]).
// The kernels are templates over the layer (HardwareTiles or EmulatedTiles), so the blocking,
// packing and edge handling that run on the hardware are the code the emulator tests on any CPU.

#include <cstdint>
#include <string>

namespace ember::kernels::cpu {

// A tile is up to 16 rows of 64 bytes: 16 x 16 floats, or 16 rows of 16 bf16 pairs (32 bf16).
constexpr int kTileRows = 16;
constexpr int kTileRowBytes = 64;
constexpr int kTileWords = 16;  // 32-bit words (floats, or bf16 pairs) per tile row

// Palette 1's configuration: rows and bytes per row of each of the 8 tiles (0: unused).
struct TileShape {
  int rows = 0, colsb = 0;
};
struct TileConfig {
  TileShape tile[8];
};

// Which tiles the AMX kernels run on:
//   hardware:  the CPU's (AMX-TILE and AMX-BF16, and Linux granted tile data: amx_tiles_status());
//   emulated:  the scalar emulator, on any CPU (EMBER_CPU_AMX=emulate, or set_amx_tiles for tests);
//   off:       no AMX kernel runs (a CPU without AMX, a refused permission, or EMBER_CPU_AMX=off).
enum class AmxTiles { off, hardware, emulated };
// The process-wide choice: hardware where usable, else off, unless EMBER_CPU_AMX says otherwise.
AmxTiles amx_tiles();
// Chooses for the whole process; returns false, changing nothing, when asked for hardware tiles
// that this process cannot use. Not thread-safe with AMX kernels in flight.
bool set_amx_tiles(AmxTiles tiles);
bool amx_hardware_usable();  // the CPU has the tiles and Linux granted them
const char* amx_tiles_name(AmxTiles tiles);  // "hardware", "emulated", "off"
// What `ember info` prints: e.g. "hardware (AMX-BF16; tile data granted by arch_prctl(...))", or
// why the tiles are off.
std::string amx_description();

// The emulator: one thread's eight tiles and configuration (thread_local, as a core's registers
// are per thread). Each call checks what the hardware checks — a loaded configuration, tile
// shapes that fit the operation — and throws ember::Error where the hardware would fault.
namespace amx_emulator {
void load_config(const TileConfig& config);
void release();  // back to the unconfigured state (TILERELEASE)
void zero(int t);
// Rows of the configured width from base + r * stride; the rest of the tile is zeroed.
void load(int t, const void* base, int64_t stride);
void store(int t, void* base, int64_t stride);
// TDPBF16PS: tile c (M x N floats) += tile a (M x K pairs) . tile b (K x N pairs).
void dpbf16ps(int c, int a, int b);
// How many TDPBF16PS the emulator has run in this process (tests prove which tiles ran).
int64_t dot_products();
}  // namespace amx_emulator

// The emulated tiles as the kernels call them (tile numbers as template arguments, like the
// hardware's immediates).
struct EmulatedTiles {
  static void configure(const TileConfig& config) { amx_emulator::load_config(config); }
  static void release() { amx_emulator::release(); }
  template <int T>
  static void zero() {
    amx_emulator::zero(T);
  }
  template <int T>
  static void load(const void* base, int64_t stride) {
    amx_emulator::load(T, base, stride);
  }
  template <int T>
  static void store(void* base, int64_t stride) {
    amx_emulator::store(T, base, stride);
  }
  template <int C, int A, int B>
  static void dot() {
    amx_emulator::dpbf16ps(C, A, B);
  }
};

#if defined(__x86_64__)
#define EMBER_AMX_TILES 1
// The hardware tiles: each operation is one instruction, written as inline assembly with the
// tile number an immediate (GCC's _tile_* macros paste their tile argument into the mnemonic,
// which a template argument cannot be). Loads and stores name "memory", so the compiler keeps
// them in order with the packing stores and the C accesses around them. Only called where
// amx_hardware_usable(); assembling the instructions needs no target attribute.
struct HardwareTiles {
  static void configure(const TileConfig& config);  // LDTILECFG of palette 1 (amx_tiles.cpp)
  static void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* base, int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* base, int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>
  static void dot() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};
#else
#define EMBER_AMX_TILES 0
#endif

}  // namespace ember::kernels::cpu
