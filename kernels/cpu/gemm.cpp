// CPU matrix multiply: OpenBLAS behind the row-major contract of gemm.h, the batched driver,
// and the triple-loop reference.

#include "gemm.h"

#include <cblas.h>

#include <climits>
#include <type_traits>

#include "../../core/error.h"
#include "blas.h"
#include "../../core/cpu/parallel.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ember::kernels::cpu {

namespace {

CBLAS_TRANSPOSE cblas_trans(Transpose t) { return t == Transpose::Yes ? CblasTrans : CblasNoTrans; }

void check_blas_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    EMBER_CHECK(v >= 0 && v <= INT_MAX, "gemm: dimension ", v, " does not fit BLAS's 32-bit int (m=", m, " n=", n,
                " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
}

// C = beta * C for the k == 0 case (BLAS would be asked to do nothing; be explicit). beta == 0
// writes zeros so NaNs in an uninitialized C do not survive.
template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

template <typename T>
void gemm_blas(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  (void)blas_info();  // the first call picks OpenBLAS's kernels (Note [BLAS kernels by CPU features])
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  check_blas_int(m, n, k, lda, ldb, ldc);
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  const auto LDA = static_cast<blasint>(lda), LDB = static_cast<blasint>(ldb), LDC = static_cast<blasint>(ldc);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, alpha, a, LDA, b, LDB, beta, c, LDC);
  } else {
    cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, alpha, a, LDA, b, LDB, beta, c, LDC);
  }
}

// One product on all of ember's threads. OpenBLAS itself always runs single-threaded (see
// Note [One thread pool] in parallel.cpp): a large product is cut into blocks of C's rows (or
// columns, whichever is longer), and each thread multiplies its block with one BLAS call.
template <typename T>
void gemm_split(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int threads = get_num_threads();
  bool nested = false;
#ifdef _OPENMP
  nested = omp_in_parallel();
#endif
  // Below ~2 MFLOP a product is done faster than threads wake up.
  if (threads <= 1 || nested || 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < 2e6 ||
      std::max(m, n) < 2 * threads) {
    return gemm_blas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  const bool by_rows = m >= n;
  const int64_t len = by_rows ? m : n;
  // Blocks of whole 16-element panels keep BLAS's packing aligned.
  const int64_t block = ((len + threads - 1) / threads + 15) / 16 * 16;
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = t * block, hi = std::min(len, lo + block);
      if (lo >= hi) continue;
      if (by_rows) {
        // Rows lo..hi of op(A) and of C.
        const T* a_blk = ta == Transpose::No ? a + lo * lda : a + lo;
        gemm_blas(ta, tb, hi - lo, n, k, alpha, a_blk, lda, b, ldb, beta, c + lo * ldc, ldc);
      } else {
        // Columns lo..hi of op(B) and of C.
        const T* b_blk = tb == Transpose::No ? b + lo : b + lo * ldb;
        gemm_blas(ta, tb, m, hi - lo, k, alpha, a, lda, b_blk, ldb, beta, c + lo, ldc);
      }
    }
  });
}

template <typename T>
void gemm_batched_impl(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* const* a,
                       int64_t lda, const T* const* b, int64_t ldb, T beta, T* const* c, int64_t ldc, int64_t batch) {
  if (batch <= 0) return;
  // Checked here as well as in each call: an exception cannot leave the parallel region below.
  check_blas_int(m, n, k, lda, ldb, ldc);
  const int threads = get_num_threads();
  bool nested = false;
#ifdef _OPENMP
  nested = omp_in_parallel();
#endif
  if (batch >= threads && threads > 1 && !nested) {
    // Many products: one per thread at a time, each single-threaded inside BLAS. Small products
    // (attention-sized, per-image) gain most: BLAS's own fork/join per call costs more than it saves.
    BlasSingleThreadGuard one_thread;
    parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) gemm_blas(ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i) gemm_split(ta, tb, m, n, k, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
}

template <typename T>
void gemm_reference_impl(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                         int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T av = ta == Transpose::No ? a[i * lda + p] : a[p * lda + i];
        const T bv = tb == Transpose::No ? b[p * ldb + j] : b[j * ldb + p];
        acc += static_cast<double>(av) * static_cast<double>(bv);
      }
      const double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * static_cast<double>(c[i * ldc + j]);
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * acc + prev);
    }
  }
}

}  // namespace

BlasSingleThreadGuard::BlasSingleThreadGuard() : prev_(openblas_get_num_threads()) {
  if (prev_ != 1) openblas_set_num_threads(1);
}

BlasSingleThreadGuard::~BlasSingleThreadGuard() {
  if (prev_ != 1) openblas_set_num_threads(prev_);
}

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_split(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_split(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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

void gemm_reference(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_reference_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_reference(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_reference_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ember::kernels::cpu
