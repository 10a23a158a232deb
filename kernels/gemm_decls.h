// The matrix products of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/gemm.h.
// Read only inside a backend's namespace, by kernels/cpu/gemm.h and kernels/cuda/gemm.h.

void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* const* a,
                  int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc,
                  int64_t batch);
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha, const double* const* a,
                  int64_t lda, const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc,
                  int64_t batch);
