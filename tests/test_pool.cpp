// Known-value, edge-case and error tests for pooling (layers/nn_functional.h, layers/pool.cpp).
// Expected numbers are worked out by hand in the comments.

#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/kernels/cpu/pool.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

Pool2dOptions opts(int64_t k, int64_t s = 0, int64_t p = 0, bool ceil_mode = false, bool include_pad = true) {
  return {.kernel = {k, k}, .stride = {s, s}, .padding = {p, p}, .ceil_mode = ceil_mode,
          .count_include_pad = include_pad};
}

}  // namespace

// ---- max pool ---------------------------------------------------------------------------------------

TEST_CASE("max_pool2d: 4x4 input, 2x2 windows", "[pool]") {
  //  1  5 |  2  0        windows: {1,5,3,4} -> 5 at 1    {2,0,8,7} -> 8 at 6
  //  3  4 |  8  7                 {9,6,10,11} -> 11 at 13 {-1,-2,12,-3} -> 12 at 14
  //  9  6 | -1 -2
  // 10 11 | 12 -3
  Tensor x = f64({1, 5, 2, 0, 3, 4, 8, 7, 9, 6, -1, -2, 10, 11, 12, -3}, {1, 1, 4, 4}, true);
  auto [y, idx] = max_pool2d_with_indices(x, opts(2));
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  CHECK(vec(y) == std::vector<double>{5, 8, 11, 12});
  CHECK(idx.dtype() == DType::i64);
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{1, 6, 13, 14});
  sum(y).backward();
  CHECK(vec(x.grad()) == std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0});
  CHECK(vec(max_pool2d(x, opts(2))) == vec(y));
}

TEST_CASE("max_pool2d keeps int32 indices for backward, max_pool2d_with_indices returns int64",
          "[pool]") {
  // bf16 (8, 4, 16, 16) pooled 2x2: 2048 outputs of 2 bytes, and their indices: 4 bytes each as
  // int32 (int64 would be 8). The gradient is the one the int64 indices route.
  Generator gen(5);
  const Tensor x0 = rand({8, 4, 16, 16}, {}, gen).to(DType::bf16);
  Tensor x = x0.clone(), x64 = x0.clone();
  x.requires_grad_();
  x64.requires_grad_();
  const int64_t outputs = 8 * 4 * 8 * 8;
  const int64_t before = cpu_allocator().stats().bytes_in_use;
  const Tensor y = max_pool2d(x, opts(2));
  CHECK(cpu_allocator().stats().bytes_in_use - before == outputs * (2 + 4));
  auto [y64, idx] = max_pool2d_with_indices(x64, opts(2));
  CHECK(idx.dtype() == DType::i64);
  const Tensor g = rand(y.shape(), {}, gen).to(DType::bf16);
  y.backward(g);
  y64.backward(g);
  CHECK(vec(y) == vec(y64));
  CHECK(vec(x.grad()) == vec(x64.grad()));
  CHECK(sum(x.grad().to(DType::f64)).item() == Approx(sum(g.to(DType::f64)).item()));
}

TEST_CASE("max_pool2d: overlapping windows accumulate the gradient of a shared max", "[pool]") {
  // 3x3 with the max in the centre: all four 2x2 windows (stride 1) pick it.
  Tensor x = f64({1, 2, 3, 4, 9, 5, 6, 7, 8}, {1, 1, 3, 3}, true);
  Tensor y = max_pool2d(x, opts(2, 1));
  CHECK(vec(y) == std::vector<double>{9, 9, 9, 9});
  sum(y).backward();
  CHECK(vec(x.grad()) == std::vector<double>{0, 0, 0, 0, 4, 0, 0, 0, 0});
}

TEST_CASE("max_pool2d: padding never wins, indices are plane positions, planes independent", "[pool]") {
  // All negative values: with -inf padding semantics the max is still an input element.
  Tensor x = f64({-5, -4, -3, -2, -1, -6, -7, -8, -9, /* plane 2: */ -1, -2, -3, -4, -5, -6, -7, -8, -9},
                 {1, 2, 3, 3});
  auto [y, idx] = max_pool2d_with_indices(x, opts(2, 2, 1));
  // out 2x2: windows rows {-1..0},{1..2} x cols {-1..0},{1..2}
  CHECK(y.shape() == Shape{1, 2, 2, 2});
  CHECK(vec(y) == std::vector<double>{-5, -3, -2, -1, -1, -2, -4, -5});
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3, 4, 0, 1, 3, 4});
}

TEST_CASE("max_pool2d: ties pick the first position, NaN propagates", "[pool]") {
  Tensor x = f64({2, 2, 2, 2}, {1, 1, 2, 2});
  auto [y, idx] = max_pool2d_with_indices(x, opts(2));
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{0});
  Tensor n = f64({1, NAN, 3, 0}, {1, 1, 2, 2});
  auto [yn, in] = max_pool2d_with_indices(n, opts(2));
  CHECK(std::isnan(vec(yn)[0]));
  CHECK(in.to_vector<int64_t>() == std::vector<int64_t>{1});
}

TEST_CASE("max_pool2d: output sizes follow PyTorch, including the ceil_mode rule", "[pool]") {
  Tensor x = zeros({1, 1, 6, 5});
  // floor((6 - 3) / 2) + 1 = 2; ceil gives 3 (the last window starts at 4 < 6).
  CHECK(max_pool2d(x, opts(3, 2)).shape() == Shape{1, 1, 2, 2});
  CHECK(max_pool2d(x, opts(3, 2, 0, true)).shape() == Shape{1, 1, 3, 2});
  // in 5, k 2, s 2, pad 1: floor (5 + 2 - 2) / 2 + 1 = 3; ceil would give 4, but that window
  // would start at 6 >= 5 + 1 (in the right padding), so it is dropped: 3.
  Tensor z = zeros({1, 1, 5, 5});
  CHECK(max_pool2d(z, opts(2, 2, 1)).shape() == Shape{1, 1, 3, 3});
  CHECK(max_pool2d(z, opts(2, 2, 1, true)).shape() == Shape{1, 1, 3, 3});
  // Dilation 2, k 3 spans 5: (7 - 5) / 1 + 1 = 3.
  Pool2dOptions d{.kernel = {3, 3}, .stride = {1, 1}, .dilation = {2, 2}};
  CHECK(max_pool2d(zeros({2, 7, 7}), d).shape() == Shape{2, 3, 3});
  // Batch of zero images.
  CHECK(max_pool2d(zeros({0, 3, 4, 4}), opts(2)).shape() == Shape{0, 3, 2, 2});
}

TEST_CASE("max_pool2d: float32 and a non-contiguous input", "[pool]") {
  Tensor x = arange(16, {.dtype = DType::f32}).reshape({1, 1, 4, 4}).transpose(2, 3);  // x[h][w] = 4w + h
  Tensor y = max_pool2d(x, opts(2));
  CHECK(y.dtype() == DType::f32);
  CHECK(vec(y) == std::vector<double>{5, 13, 7, 15});
}

TEST_CASE("max_pool2d: errors name the op", "[pool]") {
  CHECK_THAT(error_of([] { max_pool2d(zeros({4, 4}), opts(2)); }), Contains("max_pool2d") && Contains("4-D"));
  CHECK_THAT(error_of([] { max_pool2d(zeros({1, 1, 4, 4}), opts(2, 2, 2)); }),
             Contains("max_pool2d") && Contains("half of the kernel"));
  CHECK_THAT(error_of([] { max_pool2d(zeros({1, 1, 2, 2}), opts(3)); }),
             Contains("max_pool2d") && Contains("too small"));
  CHECK_THAT(error_of([] { max_pool2d(zeros({1, 1, 4, 4}), opts(0)); }), Contains("max_pool2d") && Contains("kernel"));
  CHECK_THAT(error_of([] { max_pool2d(zeros({1, 1, 4, 4}, {.dtype = DType::i64}), opts(2)); }),
             Contains("max_pool2d") && Contains("int64"));
  CHECK_THAT(error_of([] { max_pool2d(zeros({1, 1, 4, 4}), {.kernel = {2, 2}, .stride = {-1, 1}}); }),
             Contains("max_pool2d") && Contains("stride"));
}

// ---- avg pool ---------------------------------------------------------------------------------------

TEST_CASE("avg_pool2d: padding counted or not", "[pool]") {
  // x = 1..9 in 3x3; k 2, s 2, pad 1 -> 2x2 windows:
  //   TL {1} (3 pad cells)  TR {2,3} (2 pad)  BL {4,7} (2 pad)  BR {5,6,8,9}
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, true);
  Tensor inc = avg_pool2d(x, opts(2, 2, 1, false, true));
  check_close_margin(vec(inc), {0.25, 1.25, 2.75, 7});
  Tensor exc = avg_pool2d(x, opts(2, 2, 1, false, false));
  check_close_margin(vec(exc), {1, 2.5, 5.5, 7});
  // d sum(exc) / dx: each element gets 1 / (in-bounds count of its window).
  sum(exc).backward();
  check_close_margin(vec(x.grad()), {1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.5, 0.25, 0.25});
}

TEST_CASE("avg_pool2d: ceil_mode windows past the padding are not counted", "[pool]") {
  // x = 0..24 in 5x5, k 2, s 2, ceil -> 3x3. The last column/row windows hold one element; the
  // divisor stops at in + pad = 5 even with count_include_pad, as PyTorch.
  Tensor x = arange(25, {.dtype = DType::f64}).reshape({1, 1, 5, 5});
  Tensor y = avg_pool2d(x, opts(2, 2, 0, true, true));
  CHECK(y.shape() == Shape{1, 1, 3, 3});
  check_close_margin(vec(y), {3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24});
}

TEST_CASE("avg_pool2d: errors name the op", "[pool]") {
  Pool2dOptions dil{.kernel = {2, 2}, .dilation = {2, 2}};
  CHECK_THAT(error_of([&] { avg_pool2d(zeros({1, 1, 5, 5}), dil); }), Contains("avg_pool2d") && Contains("dilation"));
  CHECK_THAT(error_of([] { avg_pool2d(zeros({1, 1, 5, 5}), opts(3, 1, 2)); }), Contains("avg_pool2d"));
}

// ---- adaptive avg pool ------------------------------------------------------------------------------

TEST_CASE("adaptive_avg_pool2d: 5 -> 3 cells overlap", "[pool]") {
  // cells: [0, 2), [1, 4), [3, 5) -> means 1.5, 3, 4.5
  Tensor x = f64({1, 2, 3, 4, 5}, {1, 1, 1, 5}, true);
  Tensor y = adaptive_avg_pool2d(x, {1, 3});
  check_close_margin(vec(y), {1.5, 3, 4.5});
  sum(y).backward();
  check_close_margin(vec(x.grad()), {0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5});
}

TEST_CASE("adaptive_avg_pool2d: 5x5 -> 3x3 is separable, global pooling is the mean", "[pool]") {
  Tensor x = arange(25, {.dtype = DType::f64}).reshape({1, 5, 5});  // x = 5 h + w
  // Row cells average h to 0.5, 2, 3.5; column cells w likewise: out = 5 mean_h + mean_w.
  Tensor y = adaptive_avg_pool2d(x, {3, 3});
  const double m[3] = {0.5, 2, 3.5};
  std::vector<double> expected;
  for (double h : m)
    for (double w : m) expected.push_back(5 * h + w);
  check_close_margin(vec(y), expected);
  Tensor r = rand({2, 3, 4, 5}, {.dtype = DType::f64});
  check_close_margin(vec(adaptive_avg_pool2d(r, {1, 1})), vec(mean(r, {2, 3}, true)));
  CHECK_THAT(error_of([] { adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}); }),
             Contains("adaptive_avg_pool2d") && Contains("positive"));
}

// ---- threading ----------------------------------------------------------------------------------------

TEST_CASE("pool and batch_norm: results do not depend on the thread count", "[pool][batchnorm]") {
  Generator gen(3);
  Tensor x = rand({8, 16, 40, 40}, {.dtype = DType::f32}, gen);  // big enough to split every loop
  Tensor w = rand({16}, {.dtype = DType::f32}, gen);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor xl = x.detach();
    xl.requires_grad_(true);
    Tensor y = max_pool2d(xl, opts(3, 2, 1)) + avg_pool2d(xl, opts(3, 2, 1, false, false)) +
               adaptive_avg_pool2d(xl, {20, 20});
    Tensor z = batch_norm(y, Tensor(), Tensor(), w, Tensor(), true);
    sum(z * z).backward();
    return std::make_pair(vec(z), vec(xl.grad()));
  };
  const int saved = get_num_threads();
  auto one = run(1);
  auto many = run(4);
  set_num_threads(saved);
  CHECK(one.first == many.first);
  CHECK(one.second == many.second);
}

TEST_CASE("max_pool2d: the 2x2 stride-2 fast paths match the rule on ties and NaNs", "[pool]") {
  // Values from a small set (many ties), a few NaNs, widths that exercise the vector loops (4-wide
  // SSE2, 16-wide AVX-512 with a masked tail) and the scalar tail; checked against the rule
  // written out here: in row-major order, a later element wins when it is strictly greater or
  // NaN. Both index types (int64 from max_pool2d_with_indices, int32 from the kernel that
  // max_pool2d's backward uses) and, where the CPU has it, with the AVX-512 rows on and off.
  std::vector<bool> avx512_modes = {false};
  if (kernels::cpu::set_max_pool_avx512(true)) avx512_modes.push_back(true);
  for (bool avx512 : avx512_modes)
    for (int64_t w : {22, 2, 34, 64})
      for (DType dt : {DType::f32, DType::f64}) {
        REQUIRE(kernels::cpu::set_max_pool_avx512(avx512));
        const int64_t n = 2, c = 3, h = 10;
        Generator g(9 + w);
        std::vector<double> v = randint(0, 4, {n * c * h * w}, {.dtype = DType::i64}, g).to(DType::f64).to_vector<double>();
        for (size_t i = 7; i < v.size(); i += 37) v[i] = std::numeric_limits<double>::quiet_NaN();
        Tensor x = from_vector<double>(v, {n, c, h, w}).to(dt);
        auto [out, idx] = max_pool2d_with_indices(x, {.kernel = {2, 2}});
        const int64_t oh_n = h / 2, ow_n = w / 2;
        kernels::Pool2dGeometry geo;
        geo.planes = n * c, geo.in_h = h, geo.in_w = w, geo.out_h = oh_n, geo.out_w = ow_n;
        geo.kernel_h = geo.kernel_w = geo.stride_h = geo.stride_w = 2;
        Tensor out32 = empty(out.shape(), {.dtype = dt}), idx32 = empty(out.shape(), {.dtype = DType::i32});
        kernels::cpu::max_pool2d_forward(dt, DType::i32, geo, x.data(), out32.data(), idx32.data());
        const std::vector<double> o = out.to_vector<double>(), o32 = out32.to_vector<double>();
        const std::vector<int64_t> id = idx.to_vector<int64_t>(), id32 = idx32.to_vector<int64_t>();
        for (int64_t p = 0; p < n * c; ++p)
          for (int64_t oh = 0; oh < oh_n; ++oh)
            for (int64_t ow = 0; ow < ow_n; ++ow) {
              double best = -INFINITY;
              int64_t best_i = 2 * oh * w + 2 * ow;
              for (int64_t dy = 0; dy < 2; ++dy)
                for (int64_t dx = 0; dx < 2; ++dx) {
                  const int64_t i = (2 * oh + dy) * w + 2 * ow + dx;
                  const double val = v[p * h * w + i];
                  if (val > best || std::isnan(val)) best = val, best_i = i;
                }
              const int64_t k = (p * oh_n + oh) * ow_n + ow;
              INFO(dtype_name(dt) << " width " << w << " AVX-512 " << avx512 << " plane " << p << " output (" << oh
                                  << ", " << ow << ")");
              REQUIRE(id[k] == best_i);
              REQUIRE(id32[k] == best_i);
              if (std::isnan(best)) {
                REQUIRE(std::isnan(o[k]));
                REQUIRE(std::isnan(o32[k]));
              } else {
                REQUIRE(o[k] == best);
                REQUIRE(o32[k] == best);
              }
            }
      }
  kernels::cpu::set_max_pool_avx512(avx512_modes.size() == 2);
}

TEST_CASE("max_pool2d: padded windows (ResNet's 3x3/2 pad 1) match the rule on ties and NaNs", "[pool]") {
  // The cells whose window lies inside take the fixed-size loops (16 at a time with AVX-512, else
  // four at a time where four fit), the border cells the general loop: both against the rule
  // written out here, with values from a small set (many ties) and a few NaNs, in f32, f64, bf16
  // and f16, for sizes that leave tails of 1-3 cells after the groups of four and masked tails
  // after the groups of 16, with the AVX-512 rows on and off where the CPU has them.
  struct Shape2 {
    int64_t k, stride, pad;
  };
  std::vector<bool> avx512_modes = {false};
  if (kernels::cpu::set_max_pool_avx512(true)) avx512_modes.push_back(true);
  for (bool avx512 : avx512_modes)
    for (const Shape2 sp : {Shape2{3, 2, 1}, Shape2{3, 1, 1}, Shape2{2, 1, 1}, Shape2{3, 2, 0}, Shape2{2, 2, 1},
                            Shape2{3, 1, 0}})
      for (int64_t w : {7, 13, 16, 23, 40, 71})
        for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
          REQUIRE(kernels::cpu::set_max_pool_avx512(avx512));
          const int64_t n = 2, c = 2, h = 9;
          Generator g(31 + w);
          std::vector<double> v = randint(0, 4, {n * c * h * w}, {.dtype = DType::i64}, g).to(DType::f64).to_vector<double>();
          for (size_t i = 5; i < v.size(); i += 41) v[i] = std::numeric_limits<double>::quiet_NaN();
          const Tensor x = from_vector<double>(v, {n, c, h, w}).to(dt);
          auto [out, idx] = max_pool2d_with_indices(
              x, {.kernel = {sp.k, sp.k}, .stride = {sp.stride, sp.stride}, .padding = {sp.pad, sp.pad}});
          const int64_t oh_n = out.size(2), ow_n = out.size(3);
          REQUIRE(oh_n == (h + 2 * sp.pad - sp.k) / sp.stride + 1);
          const std::vector<double> o = out.to_vector<double>();
          const std::vector<int64_t> id = idx.to_vector<int64_t>();
          for (int64_t p = 0; p < n * c; ++p)
            for (int64_t oh = 0; oh < oh_n; ++oh)
              for (int64_t ow = 0; ow < ow_n; ++ow) {
                const int64_t h0 = std::max<int64_t>(oh * sp.stride - sp.pad, 0), w0 = std::max<int64_t>(ow * sp.stride - sp.pad, 0);
                const int64_t h1 = std::min(oh * sp.stride - sp.pad + sp.k, h), w1 = std::min(ow * sp.stride - sp.pad + sp.k, w);
                double best = -INFINITY;
                int64_t best_i = h0 * w + w0;
                for (int64_t ih = h0; ih < h1; ++ih)
                  for (int64_t iw = w0; iw < w1; ++iw) {
                    const double val = v[p * h * w + ih * w + iw];
                    if (val > best || std::isnan(val)) best = val, best_i = ih * w + iw;
                  }
                const int64_t k = (p * oh_n + oh) * ow_n + ow;
                INFO(dtype_name(dt) << " kernel " << sp.k << " stride " << sp.stride << " pad " << sp.pad << " width " << w
                                    << " AVX-512 " << avx512 << " plane " << p << " output (" << oh << ", " << ow << ")");
                REQUIRE(id[k] == best_i);
                if (std::isnan(best)) {
                  REQUIRE(std::isnan(o[k]));
                } else {
                  REQUIRE(o[k] == best);
                }
              }
        }
  kernels::cpu::set_max_pool_avx512(avx512_modes.size() == 2);
}
