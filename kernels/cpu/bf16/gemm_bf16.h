#pragma once
// bf16 matrix multiply on the CPU: bf16 A and B, f32 accumulation, an f32 or bf16 C (rounded to
// bf16 once, after the whole sum). Row-major contract of kernels/gemm.h (transposes, leading
// dimensions, alpha/beta; beta == 0 overwrites C). Three kernels:
//   amx:          AMX tiles, TDPBF16PS on 32 x 32 blocks (Note [bf16 GEMM on AMX tiles] in
//                 gemm_amx.cpp), where the CPU has AMX and Linux grants its tiles;
//   avx512_bf16:  packed, register-blocked VDPBF16PS (Note [bf16 GEMM on the CPU] in gemm_bf16.cpp),
//                 where the CPU has AVX512_BF16;
//   f32_fallback: both operands widened to f32 (exact) and multiplied by OpenBLAS sgemm (gemm.h).
// By default each product shape takes the one that measures fastest the first time the shape is
// seen (Note [Kernels chosen by measurement] in measured_choice.cpp). All three sum in f32 and
// round once; they differ in the order of the sums. f16 has no such path: f16 products on the CPU
// widen to f32 in layers/ (Note [Low-precision products] in layers/gemm.cpp).

#include <cstdint>
#include <string>

#include "../../../core/dtype.h"
#include "../../gemm.h"

namespace ember::kernels::cpu {

// measured: each shape's kernel chosen by timing the kernels this CPU can run; the others force one.
enum class Bf16GemmPath { measured, amx, avx512_bf16, f32_fallback };

// The process-wide path: measured where more than one kernel can run, else f32_fallback; the
// environment forces one with EMBER_CPU_BF16=amx|avx512_bf16|f32 (also "off" or "0": f32).
Bf16GemmPath bf16_gemm_path();
// "measured per shape", "amx", "avx512_bf16", "f32 fallback (OpenBLAS sgemm)".
const char* bf16_gemm_path_name(Bf16GemmPath path);
// What `ember info` and the benchmarks print: the path and, when measured, its candidates, e.g.
// "measured per shape among amx, avx512_bf16, f32 fallback".
std::string bf16_gemm_description();
bool bf16_gemm_native_available();  // the CPU can run the avx512_bf16 kernel
bool bf16_gemm_amx_available();     // the amx kernel can run: amx_tiles() (amx_tiles.h) is not off
// Chooses the path for the whole process (tests and benchmarks compare them). Returns false,
// changing nothing, when asked for a kernel this process cannot run. Not thread-safe with GEMMs
// in flight.
bool set_bf16_gemm_path(Bf16GemmPath path);
// How many gemm_bf16 / gemm_bf16_batched products ran on the avx512_bf16 kernel, and on the amx
// kernel, so far: lets a test prove which kernel ran.
int64_t bf16_gemm_native_products();
int64_t bf16_gemm_amx_products();

// C (m, n) = alpha * op(A) @ op(B) + beta * C; C f32, or bf16 (rounded once from the f32 result).
void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);

// `batch` independent products (kernels/gemm.h's gemm_batched contract), bf16 C. With at least as
// many products as threads, one product per thread at a time; otherwise each product uses all threads.
void gemm_bf16_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb, float beta,
                       BFloat16* const* c, int64_t ldc, int64_t batch);

}  // namespace ember::kernels::cpu
