#pragma once
// Matrix multiply on a CUDA device: cuBLAS behind the row-major interface of kernels/gemm.h (the
// contract), and ember's own tiled kernel (teaching material, and the fallback without cuBLAS).
//
// Which path runs (Note [GEMM paths] in gemm.cu):
//   cuBLAS (the default): cublasGemmEx (f32, FP32 compute unless set_allow_tf32(true); f16 and
//     bf16 as CUDA_R_16F / CUDA_R_16BF with CUBLAS_COMPUTE_32F, i.e. tensor cores accumulating in
//     float), cublasDgemm (f64), cublasGemmBatchedEx / cublasDgemmBatched (batched). In the SIMT
//     flavour "cuBLAS" is kernels/simt/cublas_shim.cpp, which checks every argument and
//     multiplies on the host.
//   tiled: gemm_tiled below; used for every gemm when EMBER_GEMM=tiled is set in the environment
//     (read once), or when cuBLAS cannot be initialized on the device.

#include <cstdint>

#include "../../core/dtype.h"
#include "../gemm.h"

namespace ember::kernels::gpu {

#include "../gemm_decls.h"
// gemm_batched: a, b, c are host arrays of `batch` device pointers (as on the CPU); they are copied
// to the device before the call returns, so the caller may free them right away.

// f16 and bf16: A, B and C in the 16-bit type, alpha and beta float. Products and sums run in
// float (acc_t) and each element of C is rounded to the 16-bit type once, when it is stored.
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* a, int64_t lda,
          const Half* b, int64_t ldb, float beta, Half* c, int64_t ldc);
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
          int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* const* a,
                  int64_t lda, const Half* const* b, int64_t ldb, float beta, Half* const* c, int64_t ldc,
                  int64_t batch);
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb, float beta,
                  BFloat16* const* c, int64_t ldc, int64_t batch);

// The hand-written tiled kernel (sgemm_tiled in gemm.cu), always, whatever EMBER_GEMM says.
// Same contract as gemm. Accumulates in acc_t (float for f16/bf16/f32, double for f64), in a
// different order from BLAS.
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* a,
                int64_t lda, const Half* b, int64_t ldb, float beta, Half* c, int64_t ldc);
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);

// PyTorch's torch.backends.cuda.matmul.allow_tf32: when true, f32 products through cuBLAS may use
// TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissa inputs, f32 accumulation).
// Off by default (full f32 accuracy). Process-wide; takes effect at the next call.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace ember::kernels::gpu
