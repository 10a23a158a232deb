#pragma once
// bf16 matrix multiply on the CPU: bf16 A and B, f32 accumulation, an f32 or bf16 C (rounded to
// bf16 once, after the whole sum). Row-major contract of kernels/gemm.h (transposes, leading
// dimensions, alpha/beta; beta == 0 overwrites C). Two paths, chosen at run time from CPUID
// (Note [bf16 GEMM on the CPU] in gemm_bf16.cpp):
//   avx512_bf16:  ember's own packed, register-blocked kernel on VDPBF16PS;
//   f32_fallback: both operands widened to f32 (exact) and multiplied by OpenBLAS sgemm (gemm.h).
// f16 has no such path: f16 products on the CPU widen to f32 in layers/ (Note [Low-precision
// products] in layers/gemm.cpp).

#include <cstdint>

#include "../../../core/dtype.h"
#include "../../gemm.h"

namespace ember::kernels::cpu {

enum class Bf16GemmPath { avx512_bf16, f32_fallback };

// The path bf16 products take: avx512_bf16 when the CPU has AVX512_BF16 (with AVX-512 BW and VL)
// and the environment does not say EMBER_CPU_BF16=off, f32_fallback otherwise.
Bf16GemmPath bf16_gemm_path();
const char* bf16_gemm_path_name(Bf16GemmPath path);  // "avx512_bf16" or "f32 fallback (OpenBLAS sgemm)"
bool bf16_gemm_native_available();                   // the CPU can run the avx512_bf16 path
// Chooses the path for the whole process (tests and benchmarks compare both). Returns false,
// changing nothing, when asked for avx512_bf16 on a CPU without it. Not thread-safe with GEMMs in flight.
bool set_bf16_gemm_path(Bf16GemmPath path);
// How many gemm_bf16 / gemm_bf16_batched products ran on the avx512_bf16 kernel so far: lets a
// test prove that the native path ran, not the fallback.
int64_t bf16_gemm_native_products();

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
