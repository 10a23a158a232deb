#pragma once
// The error bound the convolution tests hold a result to (tests/cuda/test_conv.cpp for the
// hand-written kernels, test_cudnn.cpp for cuDNN): a float sum compared with a double reference.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../../kernels/conv.h"

namespace ember::testing {

// The geometry of input (n, c_in, h, w) and weight (c_out, c_in / groups, kh, kw) with strides,
// padding, dilation and groups; the output size follows.
inline kernels::Conv2dGeometry geometry(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t kh,
                                        int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                                        int64_t dw, int64_t groups) {
  kernels::Conv2dGeometry g;
  g.n = n, g.c_in = c_in, g.h = h, g.w = w, g.c_out = c_out, g.kh = kh, g.kw = kw;
  g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw, g.dil_h = dh, g.dil_w = dw, g.groups = groups;
  g.out_h = ember::kernels::conv2d_out_size(h, kh, sh, ph, dh);
  g.out_w = ember::kernels::conv2d_out_size(w, kw, sw, pw, dw);
  return g;
}

struct ConvCase {
  const char* name;
  kernels::Conv2dGeometry g;
};

// The shapes both convolution tests run: padding, stride, dilation, groups, pointwise, odd sizes.
inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> all = {
      {"3x3 pad 1", geometry(2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1)},
      {"3x2 stride (2,1) pad (1,0) dilation (1,2) groups 2", geometry(3, 4, 11, 10, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2)},
      {"pointwise 1x1", geometry(2, 5, 7, 6, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1)},
      {"depthwise 3x3 stride 2 pad 1", geometry(2, 4, 9, 9, 4, 3, 3, 2, 2, 1, 1, 1, 1, 4)},
      {"5x5 stride 3 pad 2, odd sizes", geometry(1, 2, 17, 13, 5, 5, 5, 3, 3, 2, 2, 1, 1, 1)},
      {"1x1 stride 2 (not pointwise)", geometry(2, 3, 8, 7, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1)},
  };
  return all;
}

// A K-term sum of products computed in T in any order (im2col + GEMM) is within
// K eps sum |terms| of the exact sum; the references accumulate in double and round once (half
// an ulp). So each element must satisfy |got - want| <= 2 K eps S + eps |want|, where S is the
// same reference run on the absolute values of the inputs (S = sum |terms|).
template <typename T>
void require_within(const std::vector<T>& got, const std::vector<T>& want, const std::vector<T>& abs_sum, int64_t terms,
                    const std::string& what) {
  REQUIRE(got.size() == want.size());
  const double eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    INFO(what << " element " << i << ": got " << g << ", want " << w);
    if (std::isnan(w)) {
      REQUIRE(std::isnan(g));
    } else if (std::isinf(w)) {
      REQUIRE(g == w);
    } else {
      REQUIRE(std::fabs(g - w) <= 2.0 * static_cast<double>(terms) * eps * abs_sum[i] + eps * std::fabs(w));
    }
  }
}

template <typename T>
std::vector<T> abs_of(const std::vector<T>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

}  // namespace ember::testing
