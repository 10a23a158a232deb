// The cuBLAS functions ember calls, for the SIMT flavour (compiled only there: with a real GPU the
// real libcublas is linked instead).
//
// Declarations come from the real <cublas_v2.h>, so a call site that compiles here compiles
// against cuBLAS. Each function checks its arguments the way cuBLAS documents it (handle, op flags,
// m/n/k >= 0, leading dimensions against the rows of each column-major operand as stored, data and
// compute types, that every matrix is device memory) and returns the status cuBLAS would return,
// printing cuBLAS's "parameter number N had an illegal value" line for a bad argument. It then
// waits for the handle's stream (the shim runs on the host, outside the stream order, so earlier
// kernels must have finished) and multiplies with ember::kernels::cpu::gemm (OpenBLAS).
//
// So the shim checks ember's call sites — transposes, leading dimensions, sizes, stream binding,
// pointer arrays — not cuBLAS itself. TF32 compute is accepted and computed in full f32 (TF32 lets
// cuBLAS round inputs; it does not require it).
//
// 16-bit inputs (CUDA_R_16F / CUDA_R_16BF A and B, C of the same type or CUDA_R_32F,
// CUBLAS_COMPUTE_32F) are multiplied the way a tensor-core GPU does with reductions in the compute
// type: each product of two 16-bit values is exact in float, the k products are summed in float,
// alpha and beta are applied in float, and the element is rounded to C's type once. cuBLAS also
// takes all-16F with CUBLAS_COMPUTE_16F (half accumulation); ember never asks for it and the shim
// answers NOT_SUPPORTED. Pairings cuBLAS rejects (16F with 16BF, 16-bit C from 32F inputs, 16-bit
// with a 64F compute type, ...) are NOT_SUPPORTED, as from cuBLAS.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "../../core/dtype.h"
#include "../cpu/gemm.h"
#include "cublas_shim.h"
#include "shim_memory.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

using ember::kernels::Transpose;

// The live handles: a destroyed or made-up handle is NOT_INITIALIZED, as with cuBLAS, instead of
// a use-after-free.
std::mutex g_handles_mutex;
std::unordered_set<const cublasContext*> g_handles;

bool live(cublasHandle_t h) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  return h != nullptr && g_handles.count(h) != 0;
}

using ember::simt::is_device_range;

cublasStatus_t illegal(const char* fn, int param) {
  std::fprintf(stderr, " ** On entry to %s parameter number %d had an illegal value\n", fn, param);
  return CUBLAS_STATUS_INVALID_VALUE;
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
Transpose transpose_of(cublasOperation_t op) { return op == CUBLAS_OP_N ? Transpose::No : Transpose::Yes; }

// Bytes spanned by a column-major (rows, cols) matrix with leading dimension ld.
size_t span_bytes(int rows, int cols, int ld, size_t elem) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + static_cast<size_t>(rows)) * elem;
}

// The checks every gemm entry point shares; parameter numbers are those of cublas<t>gemm
// (1 handle, 2 transa, 3 transb, 4 m, 5 n, 6 k, 7 alpha, 8 A, 9 lda, 10 B, 11 ldb, 12 beta,
// 13 C, 14 ldc; 15 batchCount), also for the Ex variants, whose own numbering counts the type
// arguments too. Returns SUCCESS when the call may go ahead.
cublasStatus_t check_gemm(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const void* alpha, int lda, int ldb, const void* beta, int ldc) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(ta)) return illegal(fn, 2);
  if (!valid_op(tb)) return illegal(fn, 3);
  if (m < 0) return illegal(fn, 4);
  if (n < 0) return illegal(fn, 5);
  if (k < 0) return illegal(fn, 6);
  if (alpha == nullptr) return illegal(fn, 7);
  // op(A) is (m, k): stored (m, k) for N, (k, m) for T; the leading dimension is the stored rows.
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return illegal(fn, 9);
  if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return illegal(fn, 11);
  if (beta == nullptr) return illegal(fn, 12);
  if (ldc < std::max(1, m)) return illegal(fn, 14);
  return CUBLAS_STATUS_SUCCESS;
}

// Checks that A, B and C of one product are device memory of the right extent (A and B are not
// read when k == 0; nothing is touched when m == 0 or n == 0).
cublasStatus_t check_operands(const char* fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const void* a, int lda, const void* b, int ldb, const void* c, int ldc, size_t elem) {
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k > 0) {
    const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    if (!is_device_range(a, span_bytes(a_rows, a_cols, lda, elem))) return illegal(fn, 8);
    if (!is_device_range(b, span_bytes(b_rows, b_cols, ldb, elem))) return illegal(fn, 10);
  }
  if (!is_device_range(c, span_bytes(m, n, ldc, elem))) return illegal(fn, 13);
  return CUBLAS_STATUS_SUCCESS;
}

// Column-major C (m, n) = alpha op(A) op(B) + beta C is row-major C^T (n, m) = op(B)^T op(A)^T:
// ember's row-major CPU gemm with the operands swapped (see Note [Row-major through
// column-major cuBLAS] in kernels/cuda/gemm.cu, read backwards).
template <typename T>
void compute(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* a, int lda,
             const T* b, int ldb, T beta, T* c, int ldc) {
  ember::kernels::cpu::gemm(transpose_of(tb), transpose_of(ta), n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

// Column-major C (m, n) = alpha op(A) op(B) + beta C with 16-bit A and B, every element summed in
// float in the order p = 0, 1, ..., k - 1 and rounded to Out once (Out = float: not rounded).
template <typename In, typename Out>
void compute_16bit(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const In* a,
                   int lda, const In* b, int ldb, float beta, Out* c, int ldc) {
  const auto at = [&](const In* p, int64_t r, int64_t col, int ld) { return static_cast<float>(p[r + col * ld]); };
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) {
        const float x = ta == CUBLAS_OP_N ? at(a, i, p, lda) : at(a, p, i, lda);
        const float y = tb == CUBLAS_OP_N ? at(b, p, j, ldb) : at(b, j, p, ldb);
        acc += x * y;  // exact product: 11 (f16) or 8 (bf16) significant bits each
      }
      Out& out = c[i + static_cast<int64_t>(j) * ldc];
      const float v = alpha * acc;
      out = Out(beta == 0.0f ? v : v + beta * static_cast<float>(out));  // beta == 0: C is not read
    }
  }
}

cublasStatus_t sync(cublasHandle_t h) {
  return ember::simt::synchronize_stream(h->stream) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// The computation in stream order on the handle's stream (now, or a node of a capture).
cublasStatus_t in_stream_order(cublasHandle_t h, std::function<void()> work) {
  return ember::simt::run_in_stream_order(h->stream, std::move(work)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                                     : CUBLAS_STATUS_EXECUTION_FAILED;
}

// In: the type of A and B; Out: of C; S: of alpha and beta (the compute type's scale type).
// compute_16bit for 16-bit inputs, else the same-type compute().
template <typename In, typename Out, typename S>
void compute_any(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, S alpha, const In* a, int lda,
                 const In* b, int ldb, S beta, Out* c, int ldc) {
  if constexpr (ember::is_low_precision_v<In>)
    compute_16bit(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    compute(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Checks operands of one product: A and B of In, C of Out.
template <typename In, typename Out>
cublasStatus_t check_operands_of(const char* fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const void* a, int lda, const void* b, int ldb, const void* c, int ldc) {
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  cublasStatus_t st = check_operands(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, sizeof(In));
  if (st != CUBLAS_STATUS_SUCCESS || sizeof(Out) == sizeof(In)) return st;
  return check_operands(fn, ta, tb, m, n, 0, a, lda, b, ldb, c, ldc, sizeof(Out));  // C's own extent
}

template <typename In, typename Out = In, typename S = In>
cublasStatus_t gemm_one(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                        int k, const S* alpha, const In* a, int lda, const In* b, int ldb, const S* beta, Out* c,
                        int ldc) {
  cublasStatus_t st = check_gemm(fn, h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = check_operands_of<In, Out>(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // alpha and beta are host values (CUBLAS_POINTER_MODE_HOST): read at the call, as cuBLAS does.
  const S al = *alpha, be = *beta;
  return in_stream_order(h, [=] { compute_any(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
}

template <typename In, typename Out = In, typename S = In>
cublasStatus_t gemm_batched(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const S* alpha, const In* const* a, int lda, const In* const* b, int ldb,
                            const S* beta, Out* const* c, int ldc, int batch) {
  cublasStatus_t st = check_gemm(fn, h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (batch < 0) return illegal(fn, 15);
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  // The pointer arrays themselves must be device memory (cuBLAS reads them on the GPU).
  const size_t list_bytes = static_cast<size_t>(batch) * sizeof(void*);
  if (!is_device_range(a, list_bytes)) return illegal(fn, 8);
  if (!is_device_range(b, list_bytes)) return illegal(fn, 10);
  if (!is_device_range(c, list_bytes)) return illegal(fn, 13);
  const S al = *alpha, be = *beta;
  auto run = [=] {
    for (int i = 0; i < batch; ++i) compute_any(ta, tb, m, n, k, al, a[i], lda, b[i], ldb, be, c[i], ldc);
  };
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(h->stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusActive) {
    // Captured: the arrays are read when the node runs (as the GPU reads them), so their
    // operands cannot be checked now.
    return in_stream_order(h, run);
  }
  if ((st = sync(h)) != CUBLAS_STATUS_SUCCESS) return st;  // the arrays may have been written by a copy on the stream
  for (int i = 0; i < batch; ++i) {
    st = check_operands_of<In, Out>(fn, ta, tb, m, n, k, a[i], lda, b[i], ldb, c[i], ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  run();
  return CUBLAS_STATUS_SUCCESS;
}

// The data-type / compute-type combinations the shim computes (a subset of cuBLAS's table for
// cublasGemmEx): all-f32 with an f32 compute type, all-f64 with CUBLAS_COMPUTE_64F, and f16 or bf16
// A and B with C of the same type or f32 and CUBLAS_COMPUTE_32F[_PEDANTIC] (alpha, beta float).
// Anything else is NOT_SUPPORTED here.
enum class Kind { F32, F64, F16, F16_F32, BF16, BF16_F32, Unsupported };
Kind kind_of(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute) {
  if (at != bt) return Kind::Unsupported;
  const bool f32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  if (at == CUDA_R_32F && ct == CUDA_R_32F && (f32_compute || compute == CUBLAS_COMPUTE_32F_FAST_TF32))
    return Kind::F32;
  if (at == CUDA_R_64F && ct == CUDA_R_64F && (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC))
    return Kind::F64;
  if (at == CUDA_R_16F && f32_compute)
    return ct == CUDA_R_16F ? Kind::F16 : ct == CUDA_R_32F ? Kind::F16_F32 : Kind::Unsupported;
  if (at == CUDA_R_16BF && f32_compute)
    return ct == CUDA_R_16BF ? Kind::BF16 : ct == CUDA_R_32F ? Kind::BF16_F32 : Kind::Unsupported;
  return Kind::Unsupported;
}

// The counters behind cublas_shim::calls(), bumped when a call is accepted.
std::mutex g_calls_mutex;
ember::simt::cublas_shim::Calls g_calls;

void count(bool batched, cudaDataType at) {
  std::lock_guard<std::mutex> lock(g_calls_mutex);
  auto& c = g_calls;
  switch (at) {
    case CUDA_R_32F: ++(batched ? c.batched_ex_f32 : c.gemm_ex_f32); break;
    case CUDA_R_64F: ++(batched ? c.batched_ex_f64 : c.gemm_ex_f64); break;
    case CUDA_R_16F: ++(batched ? c.batched_ex_f16 : c.gemm_ex_f16); break;
    case CUDA_R_16BF: ++(batched ? c.batched_ex_bf16 : c.gemm_ex_bf16); break;
    default: break;
  }
}

bool valid_algo(cublasGemmAlgo_t algo) {
  return algo == CUBLAS_GEMM_DEFAULT || algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP ||
         (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  g_handles.insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    if (handle == nullptr || g_handles.erase(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const unsigned base = static_cast<unsigned>(mode) & ~static_cast<unsigned>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
      base != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t CUBLASWINAPI cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const double* alpha, const double* A, int lda,
                                           const double* B, int ldb, const double* beta, double* C, int ldc) {
  return gemm_one("cublasDgemm", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  return gemm_one("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_algo(algo)) return illegal("cublasGemmEx", 19);
  const auto one = [&](auto in, auto out, auto scale) {
    using In = decltype(in);
    using Out = decltype(out);
    using S = decltype(scale);
    const cublasStatus_t st = gemm_one<In, Out, S>("cublasGemmEx", handle, transa, transb, m, n, k,
                                                   static_cast<const S*>(alpha), static_cast<const In*>(A), lda,
                                                   static_cast<const In*>(B), ldb, static_cast<const S*>(beta),
                                                   static_cast<Out*>(C), ldc);
    if (st == CUBLAS_STATUS_SUCCESS) count(false, Atype);
    return st;
  };
  using ember::BFloat16;
  using ember::Half;
  switch (kind_of(Atype, Btype, Ctype, computeType)) {
    case Kind::F32: return one(float(), float(), float());
    case Kind::F64: return one(double(), double(), double());
    case Kind::F16: return one(Half(), Half(), float());
    case Kind::F16_F32: return one(Half(), float(), float());
    case Kind::BF16: return one(BFloat16(), BFloat16(), float());
    case Kind::BF16_F32: return one(BFloat16(), float(), float());
    case Kind::Unsupported: break;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t CUBLASWINAPI cublasDgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                               cublasOperation_t transb, int m, int n, int k, const double* alpha,
                                               const double* const Aarray[], int lda, const double* const Barray[],
                                               int ldb, const double* beta, double* const Carray[], int ldc,
                                               int batchCount) {
  return gemm_batched("cublasDgemmBatched", handle, transa, transb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta,
                      Carray, ldc, batchCount);
}

cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                const void* const Aarray[], cudaDataType Atype, int lda,
                                                const void* const Barray[], cudaDataType Btype, int ldb,
                                                const void* beta, void* const Carray[], cudaDataType Ctype, int ldc,
                                                int batchCount, cublasComputeType_t computeType,
                                                cublasGemmAlgo_t algo) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_algo(algo)) return illegal("cublasGemmBatchedEx", 21);
  const auto batched = [&](auto in, auto out, auto scale) {
    using In = decltype(in);
    using Out = decltype(out);
    using S = decltype(scale);
    const cublasStatus_t st = gemm_batched<In, Out, S>(
        "cublasGemmBatchedEx", handle, transa, transb, m, n, k, static_cast<const S*>(alpha),
        reinterpret_cast<const In* const*>(Aarray), lda, reinterpret_cast<const In* const*>(Barray), ldb,
        static_cast<const S*>(beta), reinterpret_cast<Out* const*>(Carray), ldc, batchCount);
    if (st == CUBLAS_STATUS_SUCCESS) count(true, Atype);
    return st;
  };
  using ember::BFloat16;
  using ember::Half;
  switch (kind_of(Atype, Btype, Ctype, computeType)) {
    case Kind::F32: return batched(float(), float(), float());
    case Kind::F64: return batched(double(), double(), double());
    case Kind::F16: return batched(Half(), Half(), float());
    case Kind::F16_F32: return batched(Half(), float(), float());
    case Kind::BF16: return batched(BFloat16(), BFloat16(), float());
    case Kind::BF16_F32: return batched(BFloat16(), float(), float());
    case Kind::Unsupported: break;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // extern "C"

namespace ember::simt::cublas_shim {

Calls calls() {
  std::lock_guard<std::mutex> lock(g_calls_mutex);
  return g_calls;
}

}  // namespace ember::simt::cublas_shim
