// Matrix products: known values, the BLAS path against the triple-loop reference (all transpose
// combinations, odd sizes, f32 and f64, padded leading dimensions, batched with both threading
// strategies), NumPy shape rules, no-copy transposed operands, and errors.

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>
#include <ember/kernels/cpu/gemm.h>
#include <random>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using kernels::Transpose;

namespace {

using VD = std::vector<double>;

// C = 1.5 op(A) op(B) + 0.5 C through BLAS and through the reference, with leading dimensions
// padded by `pad` (so a wrong ld shows up), compared with a tolerance that grows with k.
template <typename T>
void check_gemm_against_reference(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t pad) {
  const int64_t a_rows = ta == Transpose::No ? m : k, a_cols = ta == Transpose::No ? k : m;
  const int64_t b_rows = tb == Transpose::No ? k : n, b_cols = tb == Transpose::No ? n : k;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  const auto a = random_vector<T>(std::max<int64_t>(1, a_rows * lda), 1 + m);
  const auto b = random_vector<T>(std::max<int64_t>(1, b_rows * ldb), 2 + n);
  auto c_blas = random_vector<T>(std::max<int64_t>(1, m * ldc), 3 + k);
  auto c_ref = c_blas;
  kernels::cpu::gemm(ta, tb, m, n, k, T(1.5), a.data(), std::max<int64_t>(1, lda), b.data(), std::max<int64_t>(1, ldb),
                     T(0.5), c_blas.data(), std::max<int64_t>(1, ldc));
  kernels::cpu::gemm_reference(ta, tb, m, n, k, T(1.5), a.data(), std::max<int64_t>(1, lda), b.data(),
                               std::max<int64_t>(1, ldb), T(0.5), c_ref.data(), std::max<int64_t>(1, ldc));
  const double eps = std::is_same_v<T, float> ? 1.2e-7 : 2.2e-16;
  INFO("m=" << m << " n=" << n << " k=" << k << " pad=" << pad << " ta=" << (ta == Transpose::Yes)
            << " tb=" << (tb == Transpose::Yes) << " dtype=" << (std::is_same_v<T, float> ? "f32" : "f64"));
  CHECK(max_rel_diff(c_blas, c_ref) <= 4 * eps * (k + 2));
}

}  // namespace

TEST_CASE("mm: known values", "[gemm]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = dt});
    Tensor b = from_vector<double>({7, 8, 9, 10, 11, 12}, {3, 2}, {.dtype = dt});
    Tensor c = mm(a, b);
    CHECK(c.dtype() == dt);
    CHECK(c.shape() == Shape{2, 2});
    check_close(c, {58, 64, 139, 154});
    // Transposed views: a^T a and a a^T.
    check_close(mm(a.t(), a), {17, 22, 27, 22, 29, 36, 27, 36, 45});
    check_close(mm(a, a.t()), {14, 32, 32, 77});
    check_close(a.matmul(b), {58, 64, 139, 154});
  }
}

TEST_CASE("matmul: NumPy shape rules with known values", "[gemm]") {
  Tensor v = from_vector<double>({1, 2, 3});
  Tensor w = from_vector<double>({4, 5, 6});
  Tensor m = from_vector<double>({1, 0, 2, 0, 1, 3}, {3, 2});  // (3, 2)
  Tensor dot = matmul(v, w);
  CHECK(dot.dim() == 0);
  CHECK(dot.item() == 32);
  Tensor vm = matmul(v, m);  // (3) @ (3, 2) -> (2)
  CHECK(vm.shape() == Shape{2});
  check_close(vm, {8, 9});
  Tensor mv = matmul(m.t(), v);  // (2, 3) @ (3) -> (2)
  CHECK(mv.shape() == Shape{2});
  check_close(mv, {8, 9});
  // Batched with broadcast batch dims: (2, 1, 3, 4) @ (3, 4, 5) -> (2, 3, 3, 5); every block is an mm.
  Tensor a = arange(24, {.dtype = DType::f64}).reshape({2, 1, 3, 4}) * 0.1;
  Tensor b = arange(60, {.dtype = DType::f64}).reshape({3, 4, 5}) * 0.01 - 0.2;
  Tensor r = matmul(a, b);
  REQUIRE(r.shape() == Shape{2, 3, 3, 5});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) check_close(r[i][j], mm(a[i][0], b[j]).to_vector<double>());
  // (*, n, k) @ (k): matrix-vector per batch; (k) @ (*, k, m): vector-matrix per batch.
  Tensor bv = matmul(a, from_vector<double>({1, -1, 2, 0}));
  CHECK(bv.shape() == Shape{2, 1, 3});
  check_close(bv[1][0], matmul(a[1][0], from_vector<double>({1, -1, 2, 0})).to_vector<double>());
  Tensor vb = matmul(from_vector<double>({1, 2, 3, 4}), b);
  CHECK(vb.shape() == Shape{3, 5});
  // (*, n, k) @ (k, m) folds into one GEMM; it must equal the batched result.
  Tensor folded = matmul(a.reshape({2, 3, 4}), b[0]);
  CHECK(folded.shape() == Shape{2, 3, 5});
  check_close(folded, matmul(a.reshape({2, 3, 4}), b[0].expand({2, 4, 5})).to_vector<double>());
  // bmm
  Tensor x = arange(12, {.dtype = DType::f64}).reshape({2, 2, 3});
  Tensor y = bmm(x, x.transpose(1, 2));
  check_close(y[0], {5, 14, 14, 50});
  check_close(y[1], {149, 212, 212, 302});
}

TEST_CASE("linear: known values and shapes", "[gemm]") {
  Tensor x = from_vector<double>({1, 2, 3, -1}, {2, 2});
  Tensor w = from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor b = from_vector<double>({0.5, -1, 2});
  check_close(linear(x, w, b), {1.5, 1, 5, 3.5, -2, 4});
  check_close(linear(x, w), {1, 2, 3, 3, -1, 2});
  check_close(linear(from_vector<double>({1, 2}), w, b), {1.5, 1, 5});
  CHECK(linear(from_vector<double>({1, 2}), w, b).shape() == Shape{3});
  Tensor x3 = randn({2, 4, 2}, {.dtype = DType::f64});
  Tensor y3 = linear(x3, w, b);
  CHECK(y3.shape() == Shape{2, 4, 3});
  check_close(y3, (matmul(x3, w.t()) + b).to_vector<double>());
  // Gradients by hand: y = x W^T + b, loss = sum(y * g) => dx = g W, dW = g^T x, db = sum_rows g.
  Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_(), bl = b.clone().requires_grad_();
  Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  (linear(xl, wl, bl) * g).sum().backward();
  check_close(xl.grad(), {4, 5, 10, 11});
  check_close(wl.grad(), {13, -2, 17, -1, 21, 0});
  check_close(bl.grad(), {5, 7, 9});
  // Zero-size batch and zero in_features.
  CHECK(linear(zeros({0, 2}, {.dtype = DType::f64}), w, b).shape() == Shape{0, 3});
  check_close(linear(zeros({2, 0}, {.dtype = DType::f64}), zeros({3, 0}, {.dtype = DType::f64}), b),
              {0.5, -1, 2, 0.5, -1, 2});
}

TEST_CASE("gemm: OpenBLAS matches the reference loops", "[gemm]") {
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1},   {1, 7, 1},     {7, 5, 3},   {17, 33, 9},
                                                     {64, 64, 64}, {65, 127, 31}, {128, 1, 200}, {3, 200, 1},
                                                     {0, 4, 3},   {4, 0, 3},     {4, 3, 0},   {150, 97, 257}};
  for (Transpose ta : {Transpose::No, Transpose::Yes})
    for (Transpose tb : {Transpose::No, Transpose::Yes})
      for (const auto& s : sizes)
        for (int64_t pad : {0, 3}) {
          check_gemm_against_reference<float>(ta, tb, s[0], s[1], s[2], pad);
          check_gemm_against_reference<double>(ta, tb, s[0], s[1], s[2], pad);
        }
}

TEST_CASE("gemm: beta = 0 overwrites C, NaNs included", "[gemm]") {
  const std::vector<float> a = {1, 2}, b = {3, 4};
  std::vector<float> c = {NAN};
  kernels::cpu::gemm(Transpose::No, Transpose::No, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1);
  CHECK(c[0] == 11.0f);
  c = {NAN};
  kernels::cpu::gemm(Transpose::No, Transpose::No, 1, 1, 0, 1.0f, a.data(), 1, b.data(), 1, 0.0f, c.data(), 1);
  CHECK(c[0] == 0.0f);
}

TEST_CASE("gemm_batched: batch-parallel and BLAS-threaded paths match the reference", "[gemm]") {
  ThreadsGuard keep;
  const int64_t m = 13, n = 9, k = 21;
  for (int threads : {1, 2})
    for (int64_t batch : {1, 2, 5}) {
      set_num_threads(threads);
      const auto a = random_vector<double>(batch * m * k, 11), b = random_vector<double>(k * n, 12);
      std::vector<double> c(batch * m * n, NAN), ref(batch * m * n);
      std::vector<const double*> pa, pb;
      std::vector<double*> pc;
      for (int64_t i = 0; i < batch; ++i) {
        pa.push_back(a.data() + i * m * k);
        pb.push_back(b.data());  // one B for every product: a broadcast operand
        pc.push_back(c.data() + i * m * n);
        kernels::cpu::gemm_reference(Transpose::No, Transpose::No, m, n, k, 1.0, pa[i], k, b.data(), n, 0.0,
                                     ref.data() + i * m * n, n);
      }
      kernels::cpu::gemm_batched(Transpose::No, Transpose::No, m, n, k, 1.0, pa.data(), k, pb.data(), n, 0.0,
                                 pc.data(), n, batch);
      INFO("threads=" << threads << " batch=" << batch);
      CHECK(max_rel_diff(c, ref) <= 1e-13);
    }
}

TEST_CASE("mm: transposed views reach BLAS without a copy, other layouts are copied", "[gemm]") {
  NoGradGuard no_grad;
  Tensor a = randn({6, 4}), b = randn({6, 5});
  Tensor expected = mm(a.t().contiguous(), b);
  auto allocations = [] { return cpu_allocator().stats().allocation_count; };
  int64_t before = allocations();
  Tensor r = mm(a.t(), b);  // (4, 6) column-major @ (6, 5)
  CHECK(allocations() - before == 1);  // the output only
  check_close(r, expected.to_vector<double>(), 1e-5);
  Tensor x = randn({2, 3, 4}), y = randn({2, 5, 4});
  before = allocations();
  Tensor z = matmul(x, y.transpose(-1, -2));
  CHECK(allocations() - before == 1);
  check_close(z, bmm(x, y.transpose(-1, -2).contiguous()).to_vector<double>(), 1e-5);
  // A transposed column block of a wider matrix: still one BLAS operand (lda = 10, not 6).
  Tensor big = randn({6, 10});
  Tensor block_t = big.narrow(1, 3, 4).t();  // (4, 6), strides (1, 10)
  before = allocations();
  Tensor rb = mm(block_t, b);
  CHECK(allocations() - before == 1);
  check_close(rb, mm(block_t.contiguous(), b).to_vector<double>(), 1e-5);
  // A column step is not a BLAS layout: copied, same result.
  Tensor wide = randn({4, 12});
  Tensor stepped = wide.slice(1, 0, 12, 2);  // (4, 6), strides (12, 2)
  Tensor q = randn({6, 3});
  before = allocations();
  Tensor s = mm(stepped, q);
  CHECK(allocations() - before == 2);  // the copy and the output
  check_close(s, mm(stepped.contiguous(), q).to_vector<double>(), 1e-6);
}

TEST_CASE("mm, bmm, matmul, linear: errors name the op and the shapes", "[gemm]") {
  CHECK_THROWS_WITH(mm(ones({2, 3}), ones({4, 5})),
                    Catch::Contains("mm: shapes (2, 3) and (4, 5) cannot be multiplied (3 != 4)"));
  CHECK_THROWS_WITH(mm(ones({2, 3, 1}), ones({1, 5})), Catch::Contains("mm: expected 2-D tensors"));
  CHECK_THROWS_WITH(mm(ones({2, 2}, {.dtype = DType::i64}), ones({2, 2}, {.dtype = DType::i64})),
                    Catch::Contains("mm: expected two floating-point tensors of one dtype") &&
                        Catch::Contains("int64"));
  CHECK_THROWS_WITH(mm(ones({2, 2}), ones({2, 2}, {.dtype = DType::f64})), Catch::Contains("float64"));
  CHECK_THROWS_WITH(bmm(ones({2, 3, 4}), ones({3, 4, 5})), Catch::Contains("bmm: batch sizes differ"));
  CHECK_THROWS_WITH(bmm(ones({2, 3, 4}), ones({2, 3, 5})),
                    Catch::Contains("bmm: shapes (2, 3, 4) and (2, 3, 5) cannot be multiplied (4 != 3)"));
  CHECK_THROWS_WITH(matmul(ones({3}), ones({4})), Catch::Contains("matmul: shapes (3,) and (4,) cannot be multiplied"));
  CHECK_THROWS_WITH(matmul(ones({2, 3, 4}), ones({5, 4, 2})), Catch::Contains("matmul"));
  CHECK_THROWS_WITH(matmul(ones({}), ones({3})), Catch::Contains("matmul: both arguments need at least 1 dimension"));
  CHECK_THROWS_WITH(matmul(ones({2}, {.dtype = DType::i32}), ones({2}, {.dtype = DType::i32})),
                    Catch::Contains("matmul: expected two floating-point tensors of one dtype"));
  CHECK_THROWS_WITH(linear(ones({2, 3}), ones({4, 5})), Catch::Contains("linear: input (2, 3) and weight (4, 5)"));
  CHECK_THROWS_WITH(linear(ones({2, 3}), ones({4, 3}), ones({5})), Catch::Contains("linear: bias must have shape (4)"));
}

TEST_CASE("mm: zero-size operands", "[gemm]") {
  CHECK(mm(ones({0, 3}), ones({3, 4})).shape() == Shape{0, 4});
  Tensor z = mm(ones({2, 0}), ones({0, 3}));
  CHECK(z.shape() == Shape{2, 3});
  check_close(z, VD(6, 0.0));
  CHECK(bmm(ones({0, 2, 3}), ones({0, 3, 4})).shape() == Shape{0, 2, 4});
}
