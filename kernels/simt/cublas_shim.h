#pragma once
// What the cuBLAS shim (kernels/simt/cublas_shim.cpp) tells tests about the GEMMs it served: how
// many calls of cublasGemmEx / cublasGemmBatchedEx it computed, by the data type of A and B, so a
// test can see which precision a product really ran in (a 16-bit product reaching cuBLAS as
// CUDA_R_16F rather than widened to f32). The counters only ever grow; tests compare before and
// after.

#include <cstdint>

namespace ember::simt::cublas_shim {

struct Calls {
  int64_t gemm_ex_f32 = 0, gemm_ex_f64 = 0, gemm_ex_f16 = 0, gemm_ex_bf16 = 0;  // cublasGemmEx
  int64_t batched_ex_f32 = 0, batched_ex_f64 = 0, batched_ex_f16 = 0, batched_ex_bf16 = 0;  // cublasGemmBatchedEx
};

// A snapshot of the counters (all handles, all threads).
Calls calls();

}  // namespace ember::simt::cublas_shim
