#pragma once
// Warp matrix operations on the emulator: the PTX instructions ldmatrix (m8n8, x1/x2/x4, with and
// without .trans, b16) and mma.sync m16n8k16 (row.col, f32 accumulators, bf16 or f16 inputs),
// and the warp collective they are built on. The emulator's <mma.h> (kernels/simt/include/mma.h,
// nvcuda::wmma) uses the same pieces. Included by code that uses them (not by simt.h, which must
// come first).
//
// Note [Warp collectives]
// On a GPU, mma.sync and ldmatrix are one instruction executed by the 32 lanes of a warp together:
// each lane hands in its registers and gets back registers computed from every lane's. Here lanes
// run one after another, so each lane records a pointer to its own inputs and outputs (on its
// fiber's stack) and waits in warp_collective(); when the 32nd lane arrives, the operation runs
// once with all 32 pointers and writes every lane's outputs, then every lane continues. It is one
// warp op for the counters, it needs all 32 lanes (".aligned": a lane that exited is an error),
// and lanes calling it from different lines are reported as divergent, like a shuffle.
//
// What a lane reads from memory it reads itself, before the collective, with ordinary loads: an
// ldmatrix lane loads the 16-byte row whose address it gives, so in a lab the counters see the
// shared-memory accesses (and their bank conflicts: 16-byte accesses are served 8 lanes per pass,
// which is exactly ldmatrix's one 8x8 matrix per pass).
//
// The register layouts follow the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating
// point type", "ldmatrix"); with groupID = lane / 4 and t = lane % 4:
//   A (16x16, row):  a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//                    a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, col):   b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   C, D (16x8):     c[0..1] = C[g][2t..2t+1]  c[2..3] = C[g+8][2t..2t+1]
//   ldmatrix:        lanes 8j..8j+7 give the addresses of the 8 rows of matrix j; the lane's
//                    register j holds row g, elements 2t and 2t+1 of matrix j (.trans: of its
//                    transpose)
// with the lower-numbered element in the low 16 bits of a register. tests/simt/test_warp_matrix.cu
// checks each against these formulas on random data.

#include <cstdint>
#include <cstring>

namespace ember::simt::detail {

// Runs `fn` once with the 32 lanes' `lane_data` (lanes[l] is lane l's) when all 32 lanes of the
// calling warp have arrived; `name` is for diagnostics (block.cpp).
using WarpCollectiveFn = void (*)(void* const* lanes);
void warp_collective(const char* name, WarpCollectiveFn fn, void* lane_data, Site site);
// Stops the program: "<name> at <site>: <problem>", with the kernel and block.
[[noreturn]] void fatal_warp_matrix(const char* name, Site site, const char* problem);

// The calling CUDA thread's lane: its linear index in the block, modulo 32.
inline unsigned lane_id() {
  const ExecContext& c = tls_exec;
  return (c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z)) % 32;
}

// 16-bit floating-point bits to float: bf16 is the top half of a float; f16 goes through cuda_fp16.h.
struct Bf16Bits {
  static float to_float(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
struct F16Bits {
  static float to_float(uint16_t h) {
    __half x;
    std::memcpy(static_cast<void*>(&x), &h, 2);
    return __half2float(x);
  }
};

inline uint16_t low16(uint32_t r) { return static_cast<uint16_t>(r & 0xFFFFu); }
inline uint16_t high16(uint32_t r) { return static_cast<uint16_t>(r >> 16); }
inline uint32_t pack16(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); }

// ---- ldmatrix ----------------------------------------------------------------------------------
struct LdmatrixLane {
  uint16_t row[8];  // the row this lane's address points to (lanes < 8 * count)
  uint32_t* d;      // this lane's destination registers
};

template <int Count, bool Trans>
void ldmatrix_collective(void* const* lanes) {
  auto at = [&](unsigned l) { return static_cast<const LdmatrixLane*>(lanes[l]); };
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    for (int j = 0; j < Count; ++j) {
      const unsigned first = 8u * static_cast<unsigned>(j);  // the lane holding row 0 of matrix j
      at(l)->d[j] = Trans ? pack16(at(first + 2 * t)->row[g], at(first + 2 * t + 1)->row[g])
                          : pack16(at(first + g)->row[2 * t], at(first + g)->row[2 * t + 1]);
    }
  }
}

template <int Count, bool Trans>
inline void ldmatrix(uint32_t* d, const void* row, Site site) {
  static_assert(Count == 1 || Count == 2 || Count == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const char* name = Trans ? "ldmatrix .trans" : "ldmatrix";
  LdmatrixLane me;
  me.d = d;
  if (lane_id() < 8u * Count) {
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
      fatal_warp_matrix(name, site, "a row address is not 16-byte aligned");
    std::memcpy(me.row, row, 16);  // the lane's 16-byte row: one shared-memory access
  }
  warp_collective(name, &ldmatrix_collective<Count, Trans>, &me, site);
}

// ---- mma.sync m16n8k16 -------------------------------------------------------------------------
struct MmaLane {
  uint32_t a[4], b[2];
  float c[4];
  float* d;
};

template <class Bits>
void mma_m16n8k16_collective(void* const* lanes) {
  float A[16][16], B[16][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const MmaLane& x = *static_cast<const MmaLane*>(lanes[l]);
    const unsigned g = l / 4, t = l % 4;
    for (unsigned r = 0; r < 4; ++r) {  // a[r]: rows g (+8 for r odd), columns 2t (+8 for r >= 2)
      const unsigned row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
      A[row][col] = Bits::to_float(low16(x.a[r]));
      A[row][col + 1] = Bits::to_float(high16(x.a[r]));
    }
    for (unsigned r = 0; r < 2; ++r) {  // b[r]: rows 2t (+8 for r = 1), column g
      B[2 * t + 8 * r][g] = Bits::to_float(low16(x.b[r]));
      B[2 * t + 8 * r + 1][g] = Bits::to_float(high16(x.b[r]));
    }
    for (unsigned i = 0; i < 4; ++i) C[g + 8 * (i / 2)][2 * t + i % 2] = x.c[i];
  }
  // D = A B + C in float, k in order. Products of two 16-bit floats are exact in float; a GPU may
  // add in another order or with other rounding (docs/simt.md: compare with tolerances).
  for (unsigned l = 0; l < 32; ++l) {
    const MmaLane& x = *static_cast<const MmaLane*>(lanes[l]);
    const unsigned g = l / 4, t = l % 4;
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
      float acc = C[row][col];
      for (unsigned k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      x.d[i] = acc;
    }
  }
}

template <class Bits>
inline void mma_m16n8k16(float* d, const uint32_t* a, const uint32_t* b, const float* c, const char* name, Site site) {
  MmaLane me;
  std::memcpy(me.a, a, sizeof me.a);
  std::memcpy(me.b, b, sizeof me.b);
  std::memcpy(me.c, c, sizeof me.c);
  me.d = d;
  warp_collective(name, &mma_m16n8k16_collective<Bits>, &me, site);
}

}  // namespace ember::simt::detail

// The instructions, under the names the kernel labs' PTX wrappers use (kernels/labs/common/mma_ptx.cuh).
namespace ember::simt::ptx {

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 {d...}, [row]
inline void ldmatrix_x1(uint32_t (&d)[1], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<1, false>(d, row, EMBER_SIMT_HERE);
}
inline void ldmatrix_x2(uint32_t (&d)[2], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<2, false>(d, row, EMBER_SIMT_HERE);
}
inline void ldmatrix_x4(uint32_t (&d)[4], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<4, false>(d, row, EMBER_SIMT_HERE);
}
inline void ldmatrix_x1_trans(uint32_t (&d)[1], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<1, true>(d, row, EMBER_SIMT_HERE);
}
inline void ldmatrix_x2_trans(uint32_t (&d)[2], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<2, true>(d, row, EMBER_SIMT_HERE);
}
inline void ldmatrix_x4_trans(uint32_t (&d)[4], const void* row, EMBER_SIMT_HERE_ARGS) {
  detail::ldmatrix<4, true>(d, row, EMBER_SIMT_HERE);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                              EMBER_SIMT_HERE_ARGS) {
  detail::mma_m16n8k16<detail::Bf16Bits>(d, a, b, c, "mma.sync m16n8k16 bf16", EMBER_SIMT_HERE);
}
inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                             EMBER_SIMT_HERE_ARGS) {
  detail::mma_m16n8k16<detail::F16Bits>(d, a, b, c, "mma.sync m16n8k16 f16", EMBER_SIMT_HERE);
}

}  // namespace ember::simt::ptx
