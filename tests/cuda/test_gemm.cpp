// kernels/cuda/gemm: cuBLAS path (the shim under SIMT) and the tiled kernel against the CPU
// triple-loop reference; the cuBLAS call site's argument checking.

#include <cublas_v2.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../kernels/cpu/gemm.h"
#include "../../kernels/cuda/gemm.h"
#include "device_buffer.h"
#include "gemm_problems.h"
#include "random_data.h"

namespace {

using ember::kernels::Transpose;
using namespace ember::testing;  // DeviceBuffer, random_vector, the GEMM problems (gemm_problems.h)

// Every element within the classic bound for a k-term dot product computed in T in any order:
// |got - want| <= gamma * |alpha| * sum_p |a_ip b_pj| + 2 eps (|want| + |beta c_ij|), with
// gamma = 2 k eps (the bound is k eps; the factor 2 covers the final scaling and rounding);
// with beta == 0, C (NaN-filled by the test) is not part of the result.
// sum |a||b| is the reference gemm of the absolute values. NaN must match NaN, inf match exactly.
template <typename T>
void require_within_bound(const std::vector<T>& got, const std::vector<T>& want, const std::vector<T>& abs_sum,
                          const std::vector<T>& c0, const GemmCase& cs, T alpha, T beta, int64_t ldc) {
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      const double g = got[at], w = want[at];
      INFO("C(" << i << ", " << j << ") m=" << cs.m << " n=" << cs.n << " k=" << cs.k << ": got " << g << ", want "
                << w);
      if (std::isnan(w)) {
        REQUIRE(std::isnan(g));
      } else if (std::isinf(w)) {
        REQUIRE(g == w);
      } else {
        const double tol = 2.0 * static_cast<double>(cs.k) * eps * std::fabs(alpha) * abs_sum[at] +
                           2.0 * eps * (std::fabs(w) + (beta == T(0) ? 0.0 : std::fabs(beta * c0[at])));
        REQUIRE(std::fabs(g - w) <= tol);
      }
    }
  }
}

template <typename T>
void check_case(const GemmCase& cs, GemmPath path, T alpha, T beta, uint64_t seed) {
  GemmProblem<T> p(cs, seed);
  if (beta == T(0)) std::fill(p.c.begin(), p.c.end(), std::numeric_limits<T>::quiet_NaN());  // must be overwritten
  DeviceBuffer<T> da(p.a), db(p.b), dc(p.c);
  run_gemm(path, p, alpha, da, db, beta, dc);
  std::vector<T> want = p.c;
  ember::kernels::cpu::gemm_reference(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                      beta, want.data(), p.ldc);
  std::vector<T> abs_a(p.a.size()), abs_b(p.b.size()), abs_sum(p.c.size(), T(0));
  for (size_t i = 0; i < p.a.size(); ++i) abs_a[i] = std::fabs(p.a[i]);
  for (size_t i = 0; i < p.b.size(); ++i) abs_b[i] = std::fabs(p.b[i]);
  ember::kernels::cpu::gemm_reference(cs.ta, cs.tb, cs.m, cs.n, cs.k, T(1), abs_a.data(), p.lda, abs_b.data(), p.ldb,
                                      T(0), abs_sum.data(), p.ldc);
  const std::vector<T> got = dc.download();
  require_within_bound(got, want, abs_sum, p.c, cs, alpha, beta, p.ldc);
  // The padding between rows of C is never written.
  for (int64_t i = 0; i < cs.m; ++i)
    for (int64_t j = cs.n; j < p.ldc; ++j) {
      const size_t at = static_cast<size_t>(i * p.ldc + j);
      REQUIRE((std::isnan(p.c[at]) ? std::isnan(got[at]) : got[at] == p.c[at]));
    }
  dc.check_guards();
}

const std::vector<GemmCase>& cases() {
  static const std::vector<GemmCase> all = gemm_cases({100, 37, 64});
  return all;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda gemm and gemm_tiled match the CPU reference (all transposes, ragged, padded ld)",
                   "[cuda][gemm]", float, double) {
  using T = TestType;
  const GemmPath path = GENERATE(GemmPath::Gemm, GemmPath::Tiled);
  uint64_t seed = 100;
  for (const GemmCase& cs : cases()) {
    INFO("path " << (path == GemmPath::Gemm ? "gemm" : "tiled") << " ta=" << int(cs.ta) << " tb=" << int(cs.tb));
    check_case<T>(cs, path, T(1), T(0), seed++);
    check_case<T>(cs, path, T(-1.5), T(0.5), seed++);
  }
}

TEMPLATE_TEST_CASE("cuda gemm: empty products and k == 0", "[cuda][gemm]", float, double) {
  using T = TestType;
  const GemmPath path = GENERATE(GemmPath::Gemm, GemmPath::Tiled);
  // m == 0 / n == 0: nothing is touched (guards and contents intact).
  check_case<T>({0, 5, 3, Transpose::No, Transpose::No, 0}, path, T(1), T(0.5), 1);
  check_case<T>({4, 0, 3, Transpose::Yes, Transpose::No, 1}, path, T(1), T(0.5), 2);
  // k == 0: C = beta * C, and beta == 0 clears even NaN.
  check_case<T>({7, 9, 0, Transpose::No, Transpose::Yes, 2}, path, T(2), T(0.5), 3);
  check_case<T>({7, 9, 0, Transpose::No, Transpose::No, 0}, path, T(2), T(0), 4);
  // As on the CPU, operands that are not read need no valid leading dimension (nor a pointer).
  if (path == GemmPath::Gemm) {
    DeviceBuffer<T> c(4);
    const T* none = nullptr;  // typed: a bare nullptr would match the f16/bf16 overloads too
    ember::kernels::gpu::gemm(Transpose::No, Transpose::No, 0, 3, 5, T(1), none, 0, none, 0, T(0), nullptr, 0);
    ember::kernels::gpu::gemm(Transpose::No, Transpose::Yes, 2, 2, 0, T(1), none, 0, none, 0, T(0), c.data(), 2);
    REQUIRE(c.download() == std::vector<T>(4, T(0)));
    c.check_guards();
  }
}

TEMPLATE_TEST_CASE("cuda gemm: NaN and Inf in A propagate like the reference", "[cuda][gemm]", float, double) {
  using T = TestType;
  const GemmPath path = GENERATE(GemmPath::Gemm, GemmPath::Tiled);
  const GemmCase cs{9, 40, 70, Transpose::No, Transpose::No, 0};
  GemmProblem<T> p(cs, 7);
  p.a[2 * p.lda + 5] = std::numeric_limits<T>::quiet_NaN();     // row 2 of C: NaN
  p.a[6 * p.lda + 9] = std::numeric_limits<T>::infinity();      // row 6: +-inf (or NaN where signs mix)
  for (int64_t j = 0; j < cs.n; ++j) p.b[9 * p.ldb + j] = T(1);  // ...all +inf: B row 9 is positive
  DeviceBuffer<T> da(p.a), db(p.b), dc(p.c);
  run_gemm(path, p, T(1), da, db, T(0), dc);
  const std::vector<T> got = dc.download();
  for (int64_t j = 0; j < cs.n; ++j) {
    REQUIRE(std::isnan(got[static_cast<size_t>(2 * p.ldc + j)]));
    REQUIRE(got[static_cast<size_t>(6 * p.ldc + j)] == std::numeric_limits<T>::infinity());
    REQUIRE(std::isfinite(got[static_cast<size_t>(0 * p.ldc + j)]));
  }
  dc.check_guards();
}

TEMPLATE_TEST_CASE("cuda gemm_batched matches per-product references, with a broadcast operand", "[cuda][gemm]",
                   float, double) {
  using T = TestType;
  const int64_t m = 33, n = 20, k = 45, batch = 4;
  const Transpose ta = GENERATE(Transpose::No, Transpose::Yes);
  const Transpose tb = GENERATE(Transpose::No, Transpose::Yes);
  const int64_t lda = ta == Transpose::No ? k : m, ldb = tb == Transpose::No ? n : k, ldc = n;
  BroadcastBatch<T> x(m, n, k, batch);
  ember::kernels::gpu::gemm_batched(ta, tb, m, n, k, T(0.75), x.ap.data(), lda, x.bp.data(), ldb, T(-1), x.cp.data(),
                                     ldc, batch);
  const std::vector<T> got = x.dc.download();
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<T> want(x.c.begin() + i * m * n, x.c.begin() + (i + 1) * m * n);
    ember::kernels::cpu::gemm_reference(ta, tb, m, n, k, T(0.75), x.a.data(), lda, x.b.data() + i * k * n, ldb, T(-1),
                                        want.data(), ldc);
    std::vector<T> g(got.begin() + i * m * n, got.begin() + (i + 1) * m * n);
    // |a|, |b|, |c| <= 1: sum |a b| <= k, so the bound of the test above is at most 2 k^2 eps.
    ember::testing::require_close(g, want, 2.0 * k * k * eps, 4 * eps, "batch " + std::to_string(i));
  }
  x.dc.check_guards();
  // An empty batch is a no-op.
  ember::kernels::gpu::gemm_batched(ta, tb, m, n, k, T(1), x.ap.data(), lda, x.bp.data(), ldb, T(0), x.cp.data(), ldc,
                                     0);
  REQUIRE(x.dc.download() == got);
}

TEST_CASE("cuda gemm: allow_tf32 switch (TF32 inputs: ~1e-3 relative per product)", "[cuda][gemm]") {
  REQUIRE_FALSE(ember::kernels::gpu::allow_tf32());
  ember::kernels::gpu::set_allow_tf32(true);
  const int64_t m = 20, n = 30, k = 50;
  const std::vector<float> a = random_vector<float>(m * k, 21), b = random_vector<float>(k * n, 22);
  DeviceBuffer<float> da(a), db(b), dc(static_cast<size_t>(m * n));
  ember::kernels::gpu::gemm(Transpose::No, Transpose::No, m, n, k, 1.0f, da.data(), k, db.data(), n, 0.0f, dc.data(),
                             n);
  ember::kernels::gpu::set_allow_tf32(false);
  std::vector<float> want(static_cast<size_t>(m * n));
  ember::kernels::cpu::gemm_reference(Transpose::No, Transpose::No, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                                      want.data(), n);
  // TF32 keeps 10 mantissa bits of each input: each product is off by <= 2^-10 relative, so the
  // sum by <= 2^-10 * sum |a b| <= 2^-10 * k.
  ember::testing::require_close(dc.download(), want, k * std::ldexp(1.0, -10), 0);
  REQUIRE_FALSE(ember::kernels::gpu::allow_tf32());
}

TEST_CASE("cuda gemm: bad leading dimensions are ember::Errors at the call site", "[cuda][gemm]") {
  DeviceBuffer<float> a(64), b(64), c(64);
  REQUIRE_THROWS_AS(ember::kernels::gpu::gemm(Transpose::No, Transpose::No, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4,
                                               0.0f, c.data(), 4),
                    ember::Error);
  REQUIRE_THROWS_AS(ember::kernels::gpu::gemm_tiled(Transpose::No, Transpose::Yes, 4, 4, 4, 1.0f, a.data(), 4,
                                                     b.data(), 3, 0.0f, c.data(), 4),
                    ember::Error);
  REQUIRE_THROWS_AS(ember::kernels::gpu::gemm(Transpose::No, Transpose::No, 4, 5, 4, 1.0f, a.data(), 4, b.data(), 5,
                                               0.0f, c.data(), 4),
                    ember::Error);
  c.check_guards();
}

// Straight at the library (real cuBLAS on a GPU, the shim under SIMT): cuBLAS's own argument
// checks, which the shim must reproduce so that a wrong call site fails in CI too.
TEST_CASE("cuBLAS (or its SIMT shim) rejects a bad lda with CUBLAS_STATUS_INVALID_VALUE", "[cuda][gemm]") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> a(64), b(64), c(64);
  const float one = 1, zero = 0;
  // Column-major (m, k) A needs lda >= m = 4.
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), CUDA_R_32F, 3, b.data(), CUDA_R_32F, 4,
                     &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  // Transposed A is stored (k, m): lda >= k = 6.
  CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 6, &one, a.data(), CUDA_R_32F, 4, b.data(), CUDA_R_32F, 6,
                     &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), CUDA_R_32F, 4, b.data(), CUDA_R_32F, 4,
                     &zero, c.data(), CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, a.data(), CUDA_R_32F, 4, b.data(), CUDA_R_32F, 4,
                     &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  // A good call succeeds and C is written (C = A B with A = B = 0.5 everywhere: 4 * 0.25 = 1).
  std::vector<float> half(64, 0.5f);
  a.upload(half);
  b.upload(half);
  REQUIRE(cublasSetStream(h, nullptr) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), CUDA_R_32F, 4, b.data(), CUDA_R_32F, 4,
                       &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
          CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = c.download();
  for (int i = 0; i < 16; ++i) REQUIRE(got[static_cast<size_t>(i)] == 1.0f);
#if defined(EMBER_SIMT)
  // The shim also knows which pointers are device memory (cuBLAS would fault on the GPU instead).
  std::vector<float> host(64);
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, host.data(), CUDA_R_32F, 4, b.data(), CUDA_R_32F, 4,
                     &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.data(), CUDA_R_16F, 4, b.data(), CUDA_R_32F, 4,
                     &zero, c.data(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
#endif
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  c.check_guards();
}
