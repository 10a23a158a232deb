// conv2d: a hand-computed example (forward and backward), im2col + GEMM against the direct
// seven-loop references over strides, padding, dilation, groups and both threading paths,
// the im2col/col2im adjoint identity, non-contiguous inputs, and errors.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>
#include <ember/kernels/cpu/conv.h>
#include <ember/kernels/cpu/winograd/conv3x3_choice.h>
#include <random>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;

namespace {

using VD = std::vector<double>;

// max |a - b| / (1 + |b|) over two tensors of one shape.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const VD x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]) / (1.0 + std::abs(y[i])));
  return m;
}

kernels::Conv2dGeometry geometry(const Shape& xs, const Shape& ws, const Conv2dOptions& o) {
  kernels::Conv2dGeometry g;
  g.n = xs[0], g.c_in = xs[1], g.h = xs[2], g.w = xs[3];
  g.c_out = ws[0], g.kh = ws[2], g.kw = ws[3];
  g.stride_h = o.stride.first, g.stride_w = o.stride.second;
  g.pad_h = o.padding.first, g.pad_w = o.padding.second;
  g.dil_h = o.dilation.first, g.dil_w = o.dilation.second;
  g.groups = o.groups;
  g.out_h = kernels::conv2d_out_size(g.h, g.kh, g.stride_h, g.pad_h, g.dil_h);
  g.out_w = kernels::conv2d_out_size(g.w, g.kw, g.stride_w, g.pad_w, g.dil_w);
  return g;
}

struct ConvConfig {
  Shape x, w;
  Conv2dOptions opt;
  bool bias = true;
};

}  // namespace

TEST_CASE("conv2d: a 1-channel 3x3 image and a 2x2 kernel, by hand", "[conv]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, {.dtype = dt});
    Tensor w = from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2}, {.dtype = dt});
    Tensor b = from_vector<double>({1}, {.dtype = dt});
    // y[oy][ox] = x[oy][ox] + 2 x[oy][ox+1] + 3 x[oy+1][ox] + 4 x[oy+1][ox+1]
    Tensor y = conv2d(x, w);
    CHECK(y.shape() == Shape{1, 1, 2, 2});
    CHECK(y.dtype() == dt);
    check_close(y, {37, 47, 67, 77});
    check_close(conv2d(x, w, b), {38, 48, 68, 78});
    // Padding 1: a 4x4 output; the corners see one pixel each.
    Tensor yp = conv2d(x, w, Tensor(), {.padding = {1, 1}});
    REQUIRE(yp.shape() == Shape{1, 1, 4, 4});
    check_close(yp, {4, 11, 18, 9, 18, 37, 47, 21, 36, 67, 77, 33, 14, 23, 26, 9});
    // Stride 2 with padding 1: every other output of the padded case.
    check_close(conv2d(x, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}}), {4, 18, 36, 77});
    // Dilation 2: the kernel taps the four corners.
    check_close(conv2d(x, w, Tensor(), {.dilation = {2, 2}}), {1 + 6 + 21 + 36});

    // Backward with dy = 1: dw[i][j] = sum of the pixels tap (i, j) saw, dx[p] = sum of the
    // weights that touched pixel p, db = number of outputs.
    Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_(), bl = b.clone().requires_grad_();
    conv2d(xl, wl, bl).sum().backward();
    check_close(wl.grad(), {12, 16, 24, 28});
    check_close(xl.grad(), {1, 3, 2, 4, 10, 6, 3, 7, 4});
    check_close(bl.grad(), {4});
  }
}

TEST_CASE("conv2d: im2col + GEMM matches the direct reference (forward and backward)", "[conv]") {
  ThreadsGuard keep;
  // im2col for every configuration (config 7 is a 3x3 that Winograd could take: Note [When bf16
  // Winograd pays] in kernels/cpu/winograd/conv3x3_choice.cpp).
  struct Im2colGuard {
    kernels::cpu::Conv3x3Path saved = kernels::cpu::conv3x3_path();
    Im2colGuard() { kernels::cpu::set_conv3x3_path(kernels::cpu::Conv3x3Path::im2col); }
    ~Im2colGuard() { kernels::cpu::set_conv3x3_path(saved); }
  } im2col;
  const std::vector<ConvConfig> configs = {
      {{3, 4, 9, 9}, {6, 4, 3, 3}, {.padding = {1, 1}}},
      {{2, 6, 8, 7}, {4, 3, 3, 2}, {.stride = {2, 3}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2}},
      {{4, 3, 10, 10}, {3, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 3}},
      {{1, 5, 6, 6}, {7, 5, 1, 1}, {}},
      {{3, 8, 5, 5}, {8, 2, 1, 1}, {.groups = 4}, false},
      {{2, 3, 12, 12}, {5, 3, 5, 5}, {.stride = {3, 3}, .padding = {3, 3}, .dilation = {2, 2}}},
      {{1, 2, 4, 4}, {3, 2, 2, 2}, {.stride = {4, 4}}, false},
      {{5, 16, 14, 14}, {32, 16, 3, 3}, {.padding = {1, 1}}},
      // Rows longer than one or two vectors of the AVX-512 row copies and adds (39 and 42 columns),
      // with input columns before and past the row (padding, dilation).
      {{2, 3, 5, 37}, {4, 3, 3, 3}, {.padding = {1, 2}}},
      {{2, 3, 4, 40}, {2, 3, 2, 3}, {.padding = {0, 3}, .dilation = {1, 2}}, false},
      {{2, 3, 5, 70}, {4, 3, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},  // stride-2 rows of 35 columns
      // "Same" width (out_w == w: im2col copies whole planes, then zeroes the wrapped columns),
      // with an output taller than the input (rows wholly in the padding) and columns shifted by 2.
      {{2, 3, 6, 9}, {4, 3, 3, 5}, {.padding = {2, 2}}},
  };
  for (int threads : {1, 2})
    for (DType dt : {DType::f32, DType::f64})
      for (size_t ci = 0; ci < configs.size(); ++ci) {
        set_num_threads(threads);
        const ConvConfig& c = configs[ci];
        Generator gen(100 + ci);
        Tensor x = randn(c.x, {.dtype = dt}, gen).requires_grad_();
        Tensor w = randn(c.w, {.dtype = dt}, gen).requires_grad_();
        Tensor b = c.bias ? randn({c.w[0]}, {.dtype = dt}, gen).requires_grad_() : Tensor();
        Tensor y = conv2d(x, w, b, c.opt);
        Tensor gy = randn(y.shape(), {.dtype = dt}, gen);
        y.backward(gy);

        const kernels::Conv2dGeometry g = geometry(c.x, c.w, c.opt);
        Tensor y_ref = empty({g.n, g.c_out, g.out_h, g.out_w}, {.dtype = dt});
        Tensor gx_ref = empty(c.x, {.dtype = dt}), gw_ref = empty(c.w, {.dtype = dt});
        kernels::cpu::conv2d_forward_reference(dt, g, x.data(), w.data(), c.bias ? b.data() : nullptr, y_ref.data());
        kernels::cpu::conv2d_backward_data_reference(dt, g, gy.data(), w.data(), gx_ref.data());
        kernels::cpu::conv2d_backward_weight_reference(dt, g, gy.data(), x.data(), gw_ref.data());

        // Sums of up to c_in * kh * kw (forward) or n * out_h * out_w (weight grad: 980 terms in
        // config 7, whose float32 error reaches 2.1e-5 on 2 threads) N(0,1) products.
        const double tol = dt == DType::f32 ? 5e-5 : 1e-12;
        INFO("config " << ci << " threads " << threads << " dtype " << dt);
        CHECK(max_rel_diff(y, y_ref) <= tol);
        CHECK(max_rel_diff(x.grad(), gx_ref) <= tol);
        CHECK(max_rel_diff(w.grad(), gw_ref) <= tol);
        if (c.bias) CHECK(max_rel_diff(b.grad(), gy.sum({0, 2, 3})) <= tol);
      }
}

TEST_CASE("conv2d: im2col and col2im are adjoint", "[conv]") {
  // <im2col(x), c> == <x, col2im(c)> for any x and c: col2im scatters exactly where im2col gathered.
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}};
  const kernels::Conv2dGeometry g = geometry({1, 3, 7, 6}, {1, 3, 3, 2}, o);
  const int64_t x_n = g.c_in * g.h * g.w, col_n = g.c_in * g.kh * g.kw * g.out_h * g.out_w;
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  std::vector<double> x(x_n), c(col_n), col(col_n), xt(x_n, 0.0);
  for (double& v : x) v = nd(rng);
  for (double& v : c) v = nd(rng);
  kernels::cpu::im2col(g, x.data(), col.data());
  kernels::cpu::col2im(g, c.data(), xt.data());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < col_n; ++i) lhs += col[i] * c[i];
  for (int64_t i = 0; i < x_n; ++i) rhs += x[i] * xt[i];
  CHECK(lhs == Approx(rhs).epsilon(1e-12));
}

TEST_CASE("conv2d: non-contiguous inputs give the contiguous result", "[conv]") {
  Tensor x_nhwc = randn({2, 6, 5, 3}, {.dtype = DType::f64});
  Tensor x = x_nhwc.permute({0, 3, 1, 2});  // (2, 3, 6, 5), channels-last strides
  REQUIRE_FALSE(x.is_contiguous());
  Tensor w = randn({3, 4, 3, 2}, {.dtype = DType::f64}).permute({1, 0, 2, 3});  // (4, 3, 3, 2)
  Tensor b = randn({8}, {.dtype = DType::f64}).slice(0, 0, 8, 2);
  check_close(conv2d(x, w, b, {.padding = {1, 1}}),
              conv2d(x.contiguous(), w.contiguous(), b.contiguous(), {.padding = {1, 1}}).to_vector<double>());
}

TEST_CASE("conv2d: errors name the shapes", "[conv]") {
  CHECK_THROWS_WITH(conv2d(ones({3, 4}), ones({1, 1, 1, 1})),
                    Catch::Contains("conv2d: expected input (N, C_in, H, W), got (3, 4)"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 3})), Catch::Contains("conv2d: expected weight"));
  CHECK_THROWS_WITH(conv2d(ones({1, 3, 5, 5}), ones({4, 2, 3, 3})),
                    Catch::Contains("input (1, 3, 5, 5) has 3 channels but weight (4, 2, 3, 3) with groups 1 expects 2"));
  CHECK_THROWS_WITH(conv2d(ones({1, 4, 5, 5}), ones({3, 2, 3, 3}), Tensor(), {.groups = 2}),
                    Catch::Contains("weight (3, 2, 3, 3) has 3 output channels, not divisible by groups 2"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 2, 2}), ones({1, 1, 3, 3})),
                    Catch::Contains("input (1, 1, 2, 2) is too small for weight (1, 1, 3, 3)"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.dilation = {3, 1}}),
                    Catch::Contains("too small"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 3, 3}), ones({4, 1, 2, 2}), ones({3})),
                    Catch::Contains("conv2d: expected bias (4)"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 3, 3}, {.dtype = DType::i64}), ones({1, 1, 2, 2}, {.dtype = DType::i64})),
                    Catch::Contains("conv2d: expected floating-point") && Catch::Contains("int64"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 2, 2}, {.dtype = DType::f64})), Catch::Contains("float64"));
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 2, 2}), Tensor(), {.stride = {0, 1}}),
                    Catch::Contains("conv2d: invalid options"));
}

TEST_CASE("conv2d: an empty batch", "[conv]") {
  Tensor x = zeros({0, 2, 5, 5}, {.dtype = DType::f64}).requires_grad_();
  Tensor w = ones({3, 2, 3, 3}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = ones({3}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = conv2d(x, w, b);
  CHECK(y.shape() == Shape{0, 3, 3, 3});
  y.sum().backward();
  CHECK(x.grad().shape() == Shape{0, 2, 5, 5});
  check_close(w.grad(), VD(54, 0.0));
  check_close(b.grad(), {0, 0, 0});
}
