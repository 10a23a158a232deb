// Matrix multiply on a CUDA device: the cuBLAS call site and ember's own tiled kernel.
//
// Note [GEMM paths]
// gemm() goes to cuBLAS unless EMBER_GEMM=tiled is set (read once per process) or cuBLAS could
// not be initialized on the device (no handle: e.g. a broken library install); then it runs
// sgemm_tiled below. gemm_tiled() always runs sgemm_tiled, so tests and benchmarks can compare the
// two. In the SIMT flavour cuBLAS is kernels/simt/cublas_shim.cpp: every argument is checked as
// cuBLAS would, and the product is computed on the host.
//
// Note [16-bit GEMM on CUDA]
// f16 and bf16 products stay 16-bit in memory: cuBLAS gets A, B and C as CUDA_R_16F / CUDA_R_16BF
// with CUBLAS_COMPUTE_32F and float alpha/beta (cublasGemmEx, cublasGemmBatchedEx), which on a
// tensor-core GPU multiplies the 16-bit inputs exactly, sums in float and rounds each C element
// to the 16-bit type once. The tiled kernel does the same arithmetic on CUDA cores: it widens each
// element to acc_t (float) as it loads the tile, accumulates in float and rounds on the store.
// Neither path makes an f32 copy of an operand.
//
// Note [Row-major through column-major cuBLAS]
// cuBLAS is column-major: an (r, c) matrix with leading dimension ld has element (i, j) at
// p[i + j * ld]. ember is row-major: element (i, j) of C is at c[i * ldc + j]. Read with cuBLAS's
// eyes, ember's row-major (m, n) C *is* the column-major (n, m) matrix C^T, with the same ldc.
// So instead of C = op(A) op(B) we ask cuBLAS for
//     C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m)
// Row-major B, seen column-major, is already B^T; so the first cuBLAS operand is our b with our
// tb flag, the second is our a with our ta flag, and m and n swap places. No data moves.

#include "launch.h"

#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#include "gemm.h"
#include "../../core/cuda/runtime.h"
#include "staging.h"

// Wraps a cuBLAS call: anything but CUBLAS_STATUS_SUCCESS throws ember::Error naming the call.
#define EMBER_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                                \
    const cublasStatus_t ember_cublas_status_ = (expr);                                               \
    if (ember_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                \
      EMBER_THROW("cuBLAS error ", cublasGetStatusString(ember_cublas_status_), " from ", #expr, " on cuda:", \
                  ::ember::cuda::current_device());                                                   \
  } while (0)

namespace ember::kernels::gpu {

namespace {

// ---- the tiled kernel ------------------------------------------------------------------------

// Tile sizes: a block of 16 x 16 = 256 threads computes a 64 x 64 tile of C, each thread a 4 x 4
// register tile; the k dimension is walked 16 at a time.
constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16, kThreads = kThreadsX * kThreadsY;
constexpr int kRegM = kTileM / kThreadsY, kRegN = kTileN / kThreadsX;  // 4 x 4 per thread

template <typename T>
struct TiledArgs {
  int m, n, k;
  int64_t lda, ldb, ldc;
  bool ta, tb;
  acc_t<T> alpha, beta;
  const T* a;  // one product: the operands themselves...
  const T* b;
  T* c;
  const T* const* a_list;  // ...or a batch: device arrays of pointers, product z = z0 + blockIdx.z
  const T* const* b_list;
  T* const* c_list;
  int64_t z0;
};

// sgemm_tiled: C tile (64 x 64) = alpha * sum over k-steps of A tile (64 x 16) @ B tile (16 x 64) + beta * C.
//
// Who does what. Block (blockIdx.y, blockIdx.x) owns rows [64 by, 64 by + 64) and columns
// [64 bx, 64 bx + 64) of C. Thread (ty, tx) owns the 16 C elements at rows ty + 16 i and columns
// tx + 16 j (i, j < 4): strided, not a 4 x 4 square, so that in every inner-loop read and in the
// final store, neighbouring threads (consecutive tx) touch neighbouring addresses.
//
// Why shared memory. Each A element of the tile is used by 64 C columns and each B element by
// 64 C rows. Loading the tiles once into shared memory (all 256 threads cooperating, 4 elements
// each) and then reading them from there cuts global traffic 64-fold; the 4 x 4 register tile
// then reuses every shared-memory read 4 times (a thread loads 4 A and 4 B values per k and does
// 16 multiply-adds).
//
// Coalescing and transposes. op(A)'s element (i, p) is at a[i * lda + p] (ta == No) or at
// a[p * lda + i] (ta == Yes). The cooperative load numbers the 64 x 16 tile's elements so that
// consecutive threads read consecutive addresses in memory: along p when A is stored (m, k), along
// i when it is stored (k, m). Either way the element lands at As[p][i]; likewise Bs[p][j]. The
// shared arrays carry one padding column so that the transposed stores do not all hit one bank.
//
// Ragged edges. Elements outside op(A) (row >= m or p >= k) or op(B) are loaded as 0, so partial
// tiles need no special inner loop; only the final store checks row < m and column < n.
//
// Two __syncthreads per k-step: after the load (the tile is complete before anyone reads it) and
// after the multiply (nobody overwrites the tile while a slower thread still reads it).
//
// Precision. Everything after the load is acc_t<T> (Note [Accumulation types]): a 16-bit element
// is widened to float as it enters shared memory, and C is rounded to T once, in the store.
template <typename T>
__global__ void sgemm_tiled(TiledArgs<T> args) {
  using Acc = acc_t<T>;
  __shared__ Acc As[kTileK][kTileM + 1];
  __shared__ Acc Bs[kTileK][kTileN + 1];

  const int64_t z = args.z0 + blockIdx.z;
  const T* a = args.a_list ? args.a_list[z] : args.a;
  const T* b = args.b_list ? args.b_list[z] : args.b;
  T* c = args.c_list ? args.c_list[z] : args.c;

  const int tid = threadIdx.x;
  const int tx = tid % kThreadsX, ty = tid / kThreadsX;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;

  Acc acc[kRegM][kRegN];
  for (int i = 0; i < kRegM; ++i)
    for (int j = 0; j < kRegN; ++j) acc[i][j] = Acc(0);

  for (int p0 = 0; p0 < args.k; p0 += kTileK) {
    // Cooperative load: 64 * 16 = 1024 elements of each tile, 4 per thread.
    for (int r = 0; r < (kTileM * kTileK) / kThreads; ++r) {
      const int l = tid + r * kThreads;
      int pa, ia;  // A: tile row ia (of m), tile column pa (of k)
      if (!args.ta) {
        pa = l % kTileK, ia = l / kTileK;  // A (m, k): consecutive threads walk along p
      } else {
        ia = l % kTileM, pa = l / kTileM;  // A (k, m): consecutive threads walk along i
      }
      const int64_t gi = row0 + ia, gp = p0 + pa;
      Acc av = Acc(0);
      if (gi < args.m && gp < args.k) av = Acc(args.ta ? a[gp * args.lda + gi] : a[gi * args.lda + gp]);
      As[pa][ia] = av;

      int pb, jb;  // B: tile row pb (of k), tile column jb (of n)
      if (!args.tb) {
        jb = l % kTileN, pb = l / kTileN;  // B (k, n): along j
      } else {
        pb = l % kTileK, jb = l / kTileK;  // B (n, k): along p
      }
      const int64_t gj = col0 + jb, gq = p0 + pb;
      Acc bv = Acc(0);
      if (gj < args.n && gq < args.k) bv = Acc(args.tb ? b[gj * args.ldb + gq] : b[gq * args.ldb + gj]);
      Bs[pb][jb] = bv;
    }
    __syncthreads();

    for (int p = 0; p < kTileK; ++p) {
      Acc ar[kRegM], br[kRegN];
      for (int i = 0; i < kRegM; ++i) ar[i] = As[p][ty + i * kThreadsY];
      for (int j = 0; j < kRegN; ++j) br[j] = Bs[p][tx + j * kThreadsX];
      for (int i = 0; i < kRegM; ++i)
        for (int j = 0; j < kRegN; ++j) acc[i][j] += ar[i] * br[j];
    }
    __syncthreads();
  }

  for (int i = 0; i < kRegM; ++i) {
    const int64_t gi = row0 + ty + i * kThreadsY;
    if (gi >= args.m) continue;
    for (int j = 0; j < kRegN; ++j) {
      const int64_t gj = col0 + tx + j * kThreadsX;
      if (gj >= args.n) continue;
      T* out = c + gi * args.ldc + gj;
      const Acc v = args.alpha * acc[i][j];
      *out = T(args.beta == Acc(0) ? v : v + args.beta * Acc(*out));  // beta == 0: C is never read
    }
  }
}

// A batch's operands as the footprint sees them: a matrix that several products share (a
// convolution's weight for every image) is read once; the device arrays of pointers are read too.
struct BatchOperands {
  int64_t a_mats = 0, b_mats = 0;  // distinct A and B matrices (0: one per product)
  double list_bytes = 0;           // the pointer arrays
};

// The declared cost of `batch` products C = A B, m x n x k (Note [Launch ledger]): A and B read
// once, C read when beta != 0 and written once, 2 m n k flops each; the shape names the problem for
// the calibration (train/gpu_model.h).
template <typename T>
cuda::Declared gemm_declared(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, bool reads_c,
                             cuda::Math math, const BatchOperands& ops = {}) {
  const double b = static_cast<double>(batch), e = sizeof(T);
  const double a_mats = ops.a_mats > 0 ? std::min<double>(ops.a_mats, b) : b;
  const double b_mats = ops.b_mats > 0 ? std::min<double>(ops.b_mats, b) : b;
  const double mn = double(m) * n, mk = double(m) * k, kn = double(k) * n;
  cuda::Cost c = cuda::math_cost(e * (a_mats * mk + b_mats * kn + (reads_c ? b * mn : 0)) + ops.list_bytes,
                                 b * e * mn, b * 2 * mn * k, math);
  return {c, "gemm " + std::string(dtype_name(dtype_of<T>::value)) + " " + (ta ? "T" : "N") + (tb ? "T" : "N") + " m=" +
                 std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 (batch > 1 ? " batch=" + std::to_string(batch) : "")};
}

// The launcher: grid math, batches of at most 65535 products per launch (gridDim.z's limit).
template <typename T>
void launch_tiled(TiledArgs<T> args, int64_t batch, const BatchOperands& ops = {}) {
  if (args.m == 0 || args.n == 0 || batch == 0) return;
  const int64_t grid_x = (args.n + kTileN - 1) / kTileN, grid_y = (args.m + kTileM - 1) / kTileM;
  EMBER_CHECK(grid_y <= 65535, "gemm_tiled: m = ", args.m, " needs more than 65535 row tiles");
  for (int64_t z0 = 0; z0 < batch; z0 += 65535) {
    args.z0 = z0;
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                    static_cast<unsigned>(std::min<int64_t>(65535, batch - z0)));
    EMBER_LAUNCH((sgemm_tiled<T>), grid, dim3(kThreads), 0, cuda::current_stream(),
                 gemm_declared<T>(args.ta, args.tb, args.m, args.n, args.k, grid.z, args.beta != acc_t<T>(0),
                                  std::is_same_v<T, double> ? cuda::Math::fp64 : cuda::Math::cuda_core, ops)
                     .cost,
                 args);
    cuda::check_launch("gemm_tiled");
  }
}

// ---- argument checks (shared by both paths) --------------------------------------------------

// Throws for arguments no BLAS would accept. Like the CPU gemm, a product with no output
// (m == 0 or n == 0) needs no valid leading dimensions, and with k == 0 A and B are not read.
void check_gemm_args(const char* op, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                     int64_t ldb, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    EMBER_CHECK(v >= 0 && v <= INT_MAX, op, ": dimension ", v, " does not fit a 32-bit int (m=", m, " n=", n,
                " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
  if (m == 0 || n == 0) return;
  const int64_t a_cols = ta == Transpose::No ? k : m, b_cols = tb == Transpose::No ? n : k;
  if (k > 0) {
    EMBER_CHECK(lda >= std::max<int64_t>(1, a_cols), op, ": lda = ", lda, " < ", std::max<int64_t>(1, a_cols));
    EMBER_CHECK(ldb >= std::max<int64_t>(1, b_cols), op, ": ldb = ", ldb, " < ", std::max<int64_t>(1, b_cols));
  }
  EMBER_CHECK(ldc >= std::max<int64_t>(1, n), op, ": ldc = ", ldc, " < ", std::max<int64_t>(1, n));
}

template <typename T>
TiledArgs<T> make_args(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, acc_t<T> alpha, int64_t lda,
                       int64_t ldb, acc_t<T> beta, int64_t ldc) {
  TiledArgs<T> args{};
  args.m = static_cast<int>(m), args.n = static_cast<int>(n), args.k = static_cast<int>(k);
  args.lda = lda, args.ldb = ldb, args.ldc = ldc;
  args.ta = ta == Transpose::Yes, args.tb = tb == Transpose::Yes;
  args.alpha = alpha, args.beta = beta;
  return args;
}

// ---- cuBLAS ----------------------------------------------------------------------------------

std::atomic<bool> g_allow_tf32{false};

bool tiled_forced() {
  static const bool forced = cuda::env_switch("EMBER_GEMM", "cublas", "tiled");
  return forced;
}

// One cuBLAS handle per device, created on first use and never destroyed: destroying it from a
// static destructor could run after the CUDA runtime has shut down (PyTorch leaks its handles for
// the same reason). The mutex makes "bind to the current stream, enqueue" one step, so host
// threads sharing a device's handle cannot rebind its stream under each other; the enqueue is
// asynchronous, so the lock is held for microseconds.
struct CublasSlot {
  cublasHandle_t handle = nullptr;
  bool tried = false;
};
std::mutex g_cublas_mutex;
std::vector<CublasSlot> g_cublas_slots;

// The current device's handle bound to current_stream(), or null when cuBLAS is unavailable.
// Call with g_cublas_mutex held.
cublasHandle_t bound_handle() {
  const int dev = cuda::current_device();
  if (g_cublas_slots.empty()) g_cublas_slots.resize(static_cast<size_t>(std::max(1, cuda::device_count())));
  if (dev >= static_cast<int>(g_cublas_slots.size())) return nullptr;
  CublasSlot& slot = g_cublas_slots[static_cast<size_t>(dev)];
  if (!slot.tried) {
    slot.tried = true;
    if (cublasCreate(&slot.handle) != CUBLAS_STATUS_SUCCESS) {
      slot.handle = nullptr;  // fall back to the tiled kernel on this device
    } else {
      // Split-k reductions of f16/bf16 products in the compute type (float), never in the 16-bit
      // output type: C is rounded once (Note [16-bit GEMM on CUDA]).
      const auto math =
          static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
      EMBER_CUBLAS_CHECK(cublasSetMathMode(slot.handle, math));
    }
  }
  if (slot.handle) EMBER_CUBLAS_CHECK(cublasSetStream(slot.handle, cuda::current_stream()));
  return slot.handle;
}

cublasOperation_t op_of(Transpose t) { return t == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The cudaDataType of A, B and C for cublasGemmEx / cublasGemmBatchedEx, and the compute type:
// f32 (TF32 when allowed), and f16/bf16 accumulating in f32 (Note [16-bit GEMM on CUDA]).
template <typename T>
constexpr cudaDataType data_type_of() {
  if constexpr (std::is_same_v<T, Half>) return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, BFloat16>) return CUDA_R_16BF;
  else return CUDA_R_32F;
}
template <typename T>
cublasComputeType_t compute_type_of() {
  if constexpr (std::is_same_v<T, float>)
    return g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return CUBLAS_COMPUTE_32F;
}

// The units a product of T runs on: tensor cores for f16/bf16 (and f32 when TF32 is allowed).
template <typename T>
cuda::Math math_of() {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return cuda::Math::tensor_16;
  else if constexpr (std::is_same_v<T, double>) return cuda::Math::fp64;
  else return g_allow_tf32.load() ? cuda::Math::tensor_tf32 : cuda::Math::cuda_core;
}

// One product through cuBLAS (Note [Row-major through column-major cuBLAS]: b first, m and n
// swapped). Returns false when cuBLAS is unavailable (the caller runs the tiled kernel).
template <typename T>
bool cublas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, acc_t<T> alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, acc_t<T> beta, T* c, int64_t ldc) {
  std::lock_guard<std::mutex> lock(g_cublas_mutex);
  cublasHandle_t h = bound_handle();
  if (!h) return false;
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  const auto declared = [&] {
    return gemm_declared<T>(ta == Transpose::Yes, tb == Transpose::Yes, m, n, k, 1, beta != 0, math_of<T>());
  };
  if constexpr (!std::is_same_v<T, double>) {
    constexpr cudaDataType type = data_type_of<T>();
    cuda::recorded_call(
        cuda::CallKind::cublas, "cublasGemmEx", cuda::current_stream(), declared, [&] {
          EMBER_CUBLAS_CHECK(cublasGemmEx(h, op_of(tb), op_of(ta), M, N, K, &alpha, b, type, static_cast<int>(ldb), a,
                                          type, static_cast<int>(lda), &beta, c, type, static_cast<int>(ldc),
                                          compute_type_of<T>(), CUBLAS_GEMM_DEFAULT));
        });
  } else {
    cuda::recorded_call(
        cuda::CallKind::cublas, "cublasDgemm", cuda::current_stream(), declared, [&] {
          EMBER_CUBLAS_CHECK(cublasDgemm(h, op_of(tb), op_of(ta), M, N, K, &alpha, b, static_cast<int>(ldb), a,
                                         static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
        });
  }
  return true;
}

template <typename T>
bool cublas_gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
                         const T* const* a, int64_t lda, const T* const* b, int64_t ldb, acc_t<T> beta, T* const* c,
                         int64_t ldc, int batch, const BatchOperands& ops) {
  std::lock_guard<std::mutex> lock(g_cublas_mutex);
  cublasHandle_t h = bound_handle();
  if (!h) return false;
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  const auto declared = [&] {
    return gemm_declared<T>(ta == Transpose::Yes, tb == Transpose::Yes, m, n, k, batch, beta != 0, math_of<T>(), ops);
  };
  if constexpr (!std::is_same_v<T, double>) {
    constexpr cudaDataType type = data_type_of<T>();
    cuda::recorded_call(
        cuda::CallKind::cublas, "cublasGemmBatchedEx", cuda::current_stream(), declared, [&] {
          EMBER_CUBLAS_CHECK(cublasGemmBatchedEx(h, op_of(tb), op_of(ta), M, N, K, &alpha,
                                                 reinterpret_cast<const void* const*>(b), type, static_cast<int>(ldb),
                                                 reinterpret_cast<const void* const*>(a), type, static_cast<int>(lda),
                                                 &beta, reinterpret_cast<void* const*>(c), type, static_cast<int>(ldc),
                                                 batch, compute_type_of<T>(), CUBLAS_GEMM_DEFAULT));
        });
  } else {
    cuda::recorded_call(
        cuda::CallKind::cublas, "cublasDgemmBatched", cuda::current_stream(), declared, [&] {
          EMBER_CUBLAS_CHECK(cublasDgemmBatched(h, op_of(tb), op_of(ta), M, N, K, &alpha, b, static_cast<int>(ldb), a,
                                                static_cast<int>(lda), &beta, c, static_cast<int>(ldc), batch));
        });
  }
  return true;
}

// ---- entry points ----------------------------------------------------------------------------

template <typename T>
void gemm_impl(bool tiled_only, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
               const T* a, int64_t lda, const T* b, int64_t ldb, acc_t<T> beta, T* c, int64_t ldc) {
  const char* op = tiled_only ? "gemm_tiled" : "gemm";
  check_gemm_args(op, ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  // k == 0 (C = beta * C) goes to the tiled kernel on both paths: BLAS libraries differ on
  // whether beta == 0 then clears NaNs in C, and ember's contract says it does.
  if (!tiled_only && k > 0 && !tiled_forced() && cublas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  TiledArgs<T> args = make_args<T>(ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  args.a = a, args.b = b, args.c = c;
  launch_tiled(args, 1);
}

template <typename T>
void gemm_batched_impl(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, acc_t<T> alpha,
                       const T* const* a, int64_t lda, const T* const* b, int64_t ldb, acc_t<T> beta, T* const* c,
                       int64_t ldc, int64_t batch) {
  check_gemm_args("gemm_batched", ta, tb, m, n, k, lda, ldb, ldc);
  EMBER_CHECK(batch >= 0 && batch <= INT_MAX, "gemm_batched: batch = ", batch, " does not fit a 32-bit int");
  if (m == 0 || n == 0 || batch == 0) return;
  // One product needs no pointer arrays: the plain GEMM (which a CUDA graph can capture).
  if (batch == 1) return gemm_impl<T>(false, ta, tb, m, n, k, alpha, a[0], lda, b[0], ldb, beta, c[0], ldc);
  // The pointer arrays live on the host; both paths read them on the device: one buffer holds the
  // three arrays, uploaded without blocking, or kept by a graph that captures (detail::LaunchRecords).
  const size_t bytes = 3 * static_cast<size_t>(batch) * sizeof(void*);
  std::vector<const void*> host(3 * static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    host[static_cast<size_t>(i)] = a[i];
    host[static_cast<size_t>(batch + i)] = b[i];
    host[static_cast<size_t>(2 * batch + i)] = c[i];
  }
  BatchOperands ops;
  ops.a_mats = static_cast<int64_t>(std::set<const T*>(a, a + batch).size());
  ops.b_mats = static_cast<int64_t>(std::set<const T*>(b, b + batch).size());
  ops.list_bytes = static_cast<double>(bytes);
  const detail::LaunchRecords records(host.data(), bytes);
  void* lists = records.get();
  const T* const* a_dev = static_cast<const T* const*>(lists);
  const T* const* b_dev = a_dev + batch;
  T* const* c_dev = static_cast<T* const*>(lists) + 2 * batch;
  if (k > 0 && !tiled_forced() &&
      cublas_gemm_batched(ta, tb, m, n, k, alpha, a_dev, lda, b_dev, ldb, beta, c_dev, ldc, static_cast<int>(batch), ops))
    return;
  TiledArgs<T> args = make_args<T>(ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  args.a_list = a_dev, args.b_list = b_dev, args.c_list = c_dev;
  launch_tiled(args, batch, ops);
}

}  // namespace

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl(false, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl(false, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl(true, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl(true, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* const* a,
                  int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc,
                  int64_t batch) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch);
}
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* const* a,
                  int64_t lda, const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc,
                  int64_t batch) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch);
}

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* a, int64_t lda,
          const Half* b, int64_t ldb, float beta, Half* c, int64_t ldc) {
  gemm_impl(false, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
          int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  gemm_impl(false, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* a,
                int64_t lda, const Half* b, int64_t ldb, float beta, Half* c, int64_t ldc) {
  gemm_impl(true, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_tiled(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  gemm_impl(true, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Half* const* a,
                  int64_t lda, const Half* const* b, int64_t ldb, float beta, Half* const* c, int64_t ldc,
                  int64_t batch) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch);
}
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb, float beta,
                  BFloat16* const* c, int64_t ldc, int64_t batch) {
  gemm_batched_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch);
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

}  // namespace ember::kernels::gpu
