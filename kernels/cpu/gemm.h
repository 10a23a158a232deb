#pragma once
// Matrix multiply on the CPU: OpenBLAS sgemm/dgemm behind the row-major interface of
// kernels/gemm.h (the contract), a batched variant that picks between batch-level and BLAS-level
// threading, and a plain triple-loop reference that the tests hold the BLAS path to.

#include <cstdint>

#include "../gemm.h"

namespace ember::kernels::cpu {

#include "../gemm_decls.h"
// gemm runs through OpenBLAS (single-threaded), large products split across ember's threads
// (Note [One thread pool]). gemm_batched: when batch >= get_num_threads(), the batch is split
// across threads and each BLAS call runs on one thread (no fork/join inside each small product);
// otherwise the products run one after another, each with BLAS's own threading.

// The readable reference: three loops, accumulating in double. Same contract as gemm. Slow.
void gemm_reference(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_reference(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Sets OpenBLAS to one thread for the guard's lifetime (for BLAS calls made from inside an
// ember parallel region), then restores the previous count. OpenBLAS's thread count is
// process-wide, so do not hold one across calls that other threads might make concurrently.
class BlasSingleThreadGuard {
 public:
  BlasSingleThreadGuard();
  ~BlasSingleThreadGuard();
  BlasSingleThreadGuard(const BlasSingleThreadGuard&) = delete;
  BlasSingleThreadGuard& operator=(const BlasSingleThreadGuard&) = delete;

 private:
  int prev_;
};

}  // namespace ember::kernels::cpu
