// kernels/cuda/gemm in f16 and bf16 (Note [16-bit GEMM on CUDA]): cuBLAS (the shim under SIMT)
// and the tiled kernel against a double reference computed from the same 16-bit inputs; cuBLAS's
// refusal of type combinations it does not have; and, at the Tensor level, that mm / bmm / linear
// on 16-bit CUDA tensors reach cuBLAS as 16-bit (the shim counts the calls by type), not widened.
//
// The bound. The device multiplies 16-bit values exactly in float, sums the k products in float,
// applies alpha and beta in float and rounds once to the 16-bit type (unit roundoff u16: 2^-11
// for f16, 2^-8 for bf16). So against the exact result w,
//     |got - w| <= u16 |w|  +  (k + 2) u32 (|alpha| sum_p |a_ip b_pj| + |beta c_ij|)  (+ tiny)
// with u32 = 2^-24: the first term is the final rounding, the second every float rounding before
// it (k - 1 additions, the alpha scaling and the beta update; first order, so the test allows
// twice that), and "tiny" half of f16's smallest subnormal for results that round into
// subnormals. A product accumulated in the 16-bit type, or rounded to 16 bits twice, exceeds it.

#include <cublas_v2.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "../../core/dtype.h"
#include "../../kernels/cuda/gemm.h"
#include "device_buffer.h"
#include "gemm_problems.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cublas_shim.h"
#endif

namespace {

using ember::BFloat16;
using ember::Half;
using ember::kernels::Transpose;
using namespace ember::testing;  // DeviceBuffer, random_vector, the GEMM problems (gemm_problems.h)

template <typename T>
double unit_roundoff() {
  return std::is_same_v<T, Half> ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Row-major op(X) element (r, c) of a stored matrix with leading dimension ld (the kernels/gemm.h contract).
template <typename T>
double element(const std::vector<T>& x, Transpose t, int64_t r, int64_t c, int64_t ld) {
  return static_cast<float>(t == Transpose::No ? x[static_cast<size_t>(r * ld + c)]
                                               : x[static_cast<size_t>(c * ld + r)]);
}

// One product checked against the double reference within the bound above. c0 is C before the
// call (NaN-filled when beta == 0: it must not be read).
template <typename T>
void require_within_bound(const std::vector<T>& got, const std::vector<T>& a, const std::vector<T>& b,
                          const std::vector<T>& c0, const GemmCase& cs, int64_t lda, int64_t ldb, int64_t ldc,
                          float alpha, float beta, const std::string& what) {
  const double u16 = unit_roundoff<T>(), u32 = std::ldexp(1.0, -24), tiny = std::ldexp(1.0, -25);
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < cs.k; ++p) {
        const double x = element(a, cs.ta, i, p, lda) * element(b, cs.tb, p, j, ldb);
        sum += x;  // exact in double: 22-bit products, k < 2^20 of them
        abs_sum += std::fabs(x);
      }
      const size_t at = static_cast<size_t>(i * ldc + j);
      const double bc = beta == 0.0f ? 0.0 : static_cast<double>(beta) * static_cast<float>(c0[at]);
      const double want = alpha * sum + bc;
      const double g = static_cast<float>(got[at]);
      const double before_rounding = 2.0 * (cs.k + 2) * u32 * (std::fabs(alpha) * abs_sum + std::fabs(bc));
      const double tol = u16 * std::fabs(want) + before_rounding + tiny;
      INFO(what << " C(" << i << ", " << j << ") m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " ta=" << int(cs.ta)
                << " tb=" << int(cs.tb) << ": got " << g << ", want " << want << ", tol " << tol);
      REQUIRE(std::fabs(g - want) <= tol);
    }
    for (int64_t j = cs.n; j < ldc; ++j) {  // the padding between rows of C is never written
      const size_t at = static_cast<size_t>(i * ldc + j);
      REQUIRE(got[at].bits == c0[at].bits);
    }
  }
}

template <typename T>
void check_case(const GemmCase& cs, GemmPath path, float alpha, float beta, uint64_t seed) {
  GemmProblem<T> p(cs, seed);
  if (beta == 0.0f)
    for (auto& x : p.c) x = T(std::numeric_limits<float>::quiet_NaN());  // must be overwritten, never read
  DeviceBuffer<T> da(p.a), db(p.b), dc(p.c);
  run_gemm(path, p, alpha, da, db, beta, dc);
  require_within_bound(dc.download(), p.a, p.b, p.c, cs, p.lda, p.ldb, p.ldc, alpha, beta,
                       path == GemmPath::Gemm ? "gemm" : "gemm_tiled");
  dc.check_guards();
}

}  // namespace

TEMPLATE_TEST_CASE("cuda gemm and gemm_tiled in f16/bf16: f32 accumulation, one rounding (all transposes, ragged)",
                   "[cuda][gemm][low_precision]", Half, BFloat16) {
  using T = TestType;
  const GemmPath path = GENERATE(GemmPath::Gemm, GemmPath::Tiled);
  uint64_t seed = 500;
  for (const GemmCase& cs : gemm_cases({37, 29, 64})) {
    check_case<T>(cs, path, 1.0f, 0.0f, seed++);
    check_case<T>(cs, path, -1.5f, 0.5f, seed++);
  }
  // k == 0: C = beta C (rounded to T), and beta == 0 clears NaN.
  check_case<T>({7, 9, 0, Transpose::No, Transpose::Yes, 2}, path, 2.0f, 0.5f, 1);
  check_case<T>({7, 9, 0, Transpose::No, Transpose::No, 0}, path, 2.0f, 0.0f, 2);
}

TEMPLATE_TEST_CASE("cuda gemm_batched in f16/bf16 matches the double reference per product, broadcast A",
                   "[cuda][gemm][low_precision]", Half, BFloat16) {
  using T = TestType;
  const int64_t m = 33, n = 20, k = 45;
  const int64_t batch = GENERATE(int64_t(1), int64_t(4));
  const Transpose ta = GENERATE(Transpose::No, Transpose::Yes);
  const Transpose tb = GENERATE(Transpose::No, Transpose::Yes);
  const int64_t lda = ta == Transpose::No ? k : m, ldb = tb == Transpose::No ? n : k, ldc = n;
  BroadcastBatch<T> x(m, n, k, batch);
  ember::kernels::gpu::gemm_batched(ta, tb, m, n, k, 0.75f, x.ap.data(), lda, x.bp.data(), ldb, -1.0f, x.cp.data(),
                                    ldc, batch);
  const std::vector<T> got = x.dc.download();
  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<T> bi(x.b.begin() + i * k * n, x.b.begin() + (i + 1) * k * n);
    const std::vector<T> ci(x.c.begin() + i * m * n, x.c.begin() + (i + 1) * m * n);
    const std::vector<T> gi(got.begin() + i * m * n, got.begin() + (i + 1) * m * n);
    require_within_bound(gi, x.a, bi, ci, {m, n, k, ta, tb, 0}, lda, ldb, ldc, 0.75f, -1.0f,
                         "batch " + std::to_string(i));
  }
  x.dc.check_guards();
}

// Straight at the library: cuBLAS's cublasGemmEx type table has 16F and 16BF inputs with C of the
// same type or 32F under CUBLAS_COMPUTE_32F, and nothing that mixes 16F with 16BF, takes a 16-bit
// C from 32F inputs, or pairs 16-bit data with a 64F compute type.
TEST_CASE("cuBLAS (or its SIMT shim): 16-bit GemmEx combinations, and the ones it refuses",
          "[cuda][gemm][low_precision]") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, nullptr) == CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  const double one_d = 1, zero_d = 0;
  // A = B = 0.5 (exact in both types), k = 4: every element of C is 1.
  DeviceBuffer<Half> ha(std::vector<Half>(16, Half(0.5f))), hc(16);
  DeviceBuffer<BFloat16> ba(std::vector<BFloat16>(16, BFloat16(0.5f))), bc(16);
  DeviceBuffer<float> fc(16);
  const auto gemm = [&](const void* a, cudaDataType at, const void* b, cudaDataType bt, void* c, cudaDataType ct,
                        cublasComputeType_t compute, const void* al, const void* be) {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 4, al, a, at, 4, b, bt, 4, be, c, ct, 4, compute,
                        CUBLAS_GEMM_DEFAULT);
  };
  CHECK(gemm(ha.data(), CUDA_R_16F, ha.data(), CUDA_R_16F, hc.data(), CUDA_R_16F, CUBLAS_COMPUTE_32F, &one, &zero) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(gemm(ba.data(), CUDA_R_16BF, ba.data(), CUDA_R_16BF, bc.data(), CUDA_R_16BF, CUBLAS_COMPUTE_32F, &one,
             &zero) == CUBLAS_STATUS_SUCCESS);
  CHECK(gemm(ha.data(), CUDA_R_16F, ha.data(), CUDA_R_16F, fc.data(), CUDA_R_32F, CUBLAS_COMPUTE_32F, &one, &zero) ==
        CUBLAS_STATUS_SUCCESS);
  for (const Half x : hc.download()) CHECK(static_cast<float>(x) == 1.0f);
  for (const BFloat16 x : bc.download()) CHECK(static_cast<float>(x) == 1.0f);
  for (const float x : fc.download()) CHECK(x == 1.0f);
  // Refused: mixed 16-bit inputs, 16-bit output from f32 inputs, 16-bit data with 64F compute.
  CHECK(gemm(ha.data(), CUDA_R_16F, ba.data(), CUDA_R_16BF, hc.data(), CUDA_R_16F, CUBLAS_COMPUTE_32F, &one, &zero) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(ba.data(), CUDA_R_16BF, ba.data(), CUDA_R_16BF, hc.data(), CUDA_R_16F, CUBLAS_COMPUTE_32F, &one,
             &zero) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(fc.data(), CUDA_R_32F, fc.data(), CUDA_R_32F, hc.data(), CUDA_R_16F, CUBLAS_COMPUTE_32F, &one, &zero) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(ha.data(), CUDA_R_16F, ha.data(), CUDA_R_16F, hc.data(), CUDA_R_16F, CUBLAS_COMPUTE_64F, &one_d,
             &zero_d) == CUBLAS_STATUS_NOT_SUPPORTED);
  // A bad leading dimension is still INVALID_VALUE for a 16-bit call.
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, ha.data(), CUDA_R_16F, 3, ha.data(), CUDA_R_16F, 4,
                     &zero, hc.data(), CUDA_R_16F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
        CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  hc.check_guards();
  bc.check_guards();
  fc.check_guards();
}

#if EMBER_SIMT
// The proof that 16-bit products on CUDA run natively: mm, bmm and linear (forward and backward)
// on f16/bf16 tensors reach cuBLAS as 16-bit GemmEx / GemmBatchedEx calls and make no f32 call at
// all (the widened path made only f32 calls). Gradients come out in the inputs' dtype.
TEST_CASE("cuda mm / bmm / linear in f16 and bf16 call the 16-bit cuBLAS GEMM, not the widened f32 one",
          "[cuda][low_precision][native_gemm]") {
  const char* forced = std::getenv("EMBER_GEMM");
  if (forced && std::string(forced) == "tiled") {
    WARN("EMBER_GEMM=tiled: no cuBLAS calls to count");
    return;
  }
  using namespace ember;
  namespace shim = ember::simt::cublas_shim;
  for (const DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    const Device cuda = Device::cuda(0);
    Generator gen(77);
    const auto leaf = [&](Shape shape) { return randn(shape, {}, gen).to(dt).to(cuda).requires_grad_(true); };
    const Tensor a = leaf({5, 7}), b = leaf({7, 3});
    const Tensor x = leaf({4, 6, 7}), y = leaf({4, 7, 2});
    const Tensor w = leaf({3, 7}), bias = leaf({3});
    const shim::Calls before = shim::calls();
    const Tensor loss = mm(a, b).sum() + bmm(x, y).sum() + linear(a, w, bias).sum();
    loss.to(DType::f32).backward();
    const shim::Calls after = shim::calls();
    CHECK(after.gemm_ex_f32 == before.gemm_ex_f32);
    CHECK(after.batched_ex_f32 == before.batched_ex_f32);
    const int64_t plain = dt == DType::f16 ? after.gemm_ex_f16 - before.gemm_ex_f16
                                           : after.gemm_ex_bf16 - before.gemm_ex_bf16;
    const int64_t batched = dt == DType::f16 ? after.batched_ex_f16 - before.batched_ex_f16
                                             : after.batched_ex_bf16 - before.batched_ex_bf16;
    // mm and linear: 1 forward + 2 backward products each; bmm: 1 + 2 batched.
    CHECK(plain == 6);
    CHECK(batched == 3);
    for (const Tensor* t : {&a, &b, &x, &y, &w, &bias}) {
      REQUIRE(t->grad().defined());
      CHECK(t->grad().dtype() == dt);
      CHECK(t->grad().device() == cuda);
    }
  }
}
#endif
