#pragma once
// The two bf16 GEMM kernels behind gemm_bf16.h, internal to kernels/cpu: each computes one
// thread's block of a product; gemm_bf16_paths.cpp chooses between them (and the f32 fallback)
// and splits products over threads.
//   dot_block:   VDPBF16PS on 8 x 48 register tiles (Note [bf16 GEMM on the CPU] in gemm_bf16.cpp);
//   amx_product: TDPBF16PS on 32 x 32 blocks of AMX tiles (Note [bf16 GEMM on AMX tiles] in
//                gemm_amx.cpp), on the hardware's tiles or the emulator's (amx_tiles.h).
// The Winograd convolution's bf16 products call amx_pair_product on their own pair layouts.

#include <cstdint>

#include "../../../core/dtype.h"
#include "../../gemm.h"
#include "../scratch.h"
#include "amx_tiles.h"

namespace ember::kernels::cpu {

// op(A) and op(B) of a bf16 product, in kernels/gemm.h's layouts.
struct Bf16Operands {
  Transpose ta, tb;
  const BFloat16* a;
  int64_t lda;
  const BFloat16* b;
  int64_t ldb;
};

// ---- VDPBF16PS (gemm_bf16.cpp) ------------------------------------------------------------------

constexpr int64_t kDotTileRows = 8, kDotTileCols = 48;  // a register tile of C

// One thread's packed blocks (Note [Kernel scratch from the CPU allocator] in scratch.h).
struct DotPackBuffers {
  Scratch<uint32_t> a, b;
  DotPackBuffers();
};

// C (m, n) f32 = alpha op(A) op(B) + beta C for the rows [i0, i0 + m) and columns [j0, j0 + n) of
// the product (c points at C(i0, j0)), on the calling thread. k > 0. Only where the CPU has
// AVX512_BF16 (bf16_gemm_native_available()).
void dot_block(const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k, float alpha,
               float beta, float* c, int64_t ldc, DotPackBuffers& buf);

// ---- AMX (gemm_amx.cpp) ---------------------------------------------------------------------------

constexpr int64_t kAmxTileRows = 32, kAmxTileCols = 32;  // a block of C: 2 x 2 tiles

struct AmxPackBuffers {
  Scratch<uint32_t> a, b;
  AmxPackBuffers();
};

// dot_block's contract on AMX tiles: `tiles` is hardware (only where amx_hardware_usable()) or
// emulated; both give the same bits.
void amx_product(AmxTiles tiles, const Bf16Operands& o, int64_t i0, int64_t j0, int64_t m, int64_t n, int64_t k,
                 float alpha, float beta, float* c, int64_t ldc, AmxPackBuffers& buf);

// C (rows x cols floats, row stride ldc) = A . B, or C += A . B with `add`, on bf16 pairs along the
// sum: A's row r holds `steps` pairs at a + r * lda, B's pair row p holds `cols` pairs at
// b + p * ldb. rows, cols and steps are multiples of 16 (callers pad with zero pairs); lda and ldb
// count 32-bit words. On the calling thread.
void amx_pair_product(AmxTiles tiles, int64_t rows, int64_t cols, int64_t steps, const uint32_t* a, int64_t lda,
                      const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool add);

}  // namespace ember::kernels::cpu
