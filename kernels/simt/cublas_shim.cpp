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

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "../cpu/gemm.h"
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

cublasStatus_t sync(cublasHandle_t h) {
  return cudaStreamSynchronize(h->stream) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// The computation in stream order on the handle's stream (now, or a node of a capture).
cublasStatus_t in_stream_order(cublasHandle_t h, std::function<void()> work) {
  return ember::simt::run_in_stream_order(h->stream, std::move(work)) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                                     : CUBLAS_STATUS_EXECUTION_FAILED;
}

template <typename T>
cublasStatus_t gemm_one(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                        int k, const T* alpha, const T* a, int lda, const T* b, int ldb, const T* beta, T* c,
                        int ldc) {
  cublasStatus_t st = check_gemm(fn, h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  st = check_operands(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, sizeof(T));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // alpha and beta are host values (CUBLAS_POINTER_MODE_HOST): read at the call, as cuBLAS does.
  const T al = *alpha, be = *beta;
  return in_stream_order(h, [=] { compute(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
}

template <typename T>
cublasStatus_t gemm_batched(const char* fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const T* alpha, const T* const* a, int lda, const T* const* b, int ldb,
                            const T* beta, T* const* c, int ldc, int batch) {
  cublasStatus_t st = check_gemm(fn, h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (batch < 0) return illegal(fn, 15);
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  // The pointer arrays themselves must be device memory (cuBLAS reads them on the GPU).
  const size_t list_bytes = static_cast<size_t>(batch) * sizeof(void*);
  if (!is_device_range(a, list_bytes)) return illegal(fn, 8);
  if (!is_device_range(b, list_bytes)) return illegal(fn, 10);
  if (!is_device_range(c, list_bytes)) return illegal(fn, 13);
  const T al = *alpha, be = *beta;
  auto run = [=] {
    for (int i = 0; i < batch; ++i) compute(ta, tb, m, n, k, al, a[i], lda, b[i], ldb, be, c[i], ldc);
  };
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(h->stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusActive) {
    // Captured: the arrays are read when the node runs (as the GPU reads them), so their
    // operands cannot be checked now.
    return in_stream_order(h, run);
  }
  if ((st = sync(h)) != CUBLAS_STATUS_SUCCESS) return st;  // the arrays may have been written by a copy on the stream
  for (int i = 0; i < batch; ++i) {
    st = check_operands(fn, ta, tb, m, n, k, a[i], lda, b[i], ldb, c[i], ldc, sizeof(T));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  run();
  return CUBLAS_STATUS_SUCCESS;
}

// The data-type / compute-type pairs the shim (and ember) use: all-f32 with an f32 compute type,
// all-f64 with CUBLAS_COMPUTE_64F. cuBLAS supports more; anything else is NOT_SUPPORTED here.
enum class Kind { F32, F64, Unsupported };
Kind kind_of(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute) {
  if (at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F &&
      (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
       compute == CUBLAS_COMPUTE_32F_PEDANTIC))
    return Kind::F32;
  if (at == CUDA_R_64F && bt == CUDA_R_64F && ct == CUDA_R_64F &&
      (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC))
    return Kind::F64;
  return Kind::Unsupported;
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
  switch (kind_of(Atype, Btype, Ctype, computeType)) {
    case Kind::F32:
      return gemm_one("cublasGemmEx", handle, transa, transb, m, n, k, static_cast<const float*>(alpha),
                      static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
                      static_cast<const float*>(beta), static_cast<float*>(C), ldc);
    case Kind::F64:
      return gemm_one("cublasGemmEx", handle, transa, transb, m, n, k, static_cast<const double*>(alpha),
                      static_cast<const double*>(A), lda, static_cast<const double*>(B), ldb,
                      static_cast<const double*>(beta), static_cast<double*>(C), ldc);
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
  switch (kind_of(Atype, Btype, Ctype, computeType)) {
    case Kind::F32:
      return gemm_batched("cublasGemmBatchedEx", handle, transa, transb, m, n, k, static_cast<const float*>(alpha),
                          reinterpret_cast<const float* const*>(Aarray), lda,
                          reinterpret_cast<const float* const*>(Barray), ldb, static_cast<const float*>(beta),
                          reinterpret_cast<float* const*>(Carray), ldc, batchCount);
    case Kind::F64:
      return gemm_batched("cublasGemmBatchedEx", handle, transa, transb, m, n, k, static_cast<const double*>(alpha),
                          reinterpret_cast<const double* const*>(Aarray), lda,
                          reinterpret_cast<const double* const*>(Barray), ldb, static_cast<const double*>(beta),
                          reinterpret_cast<double* const*>(Carray), ldc, batchCount);
    case Kind::Unsupported: break;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
