#pragma once
// The Winograd F(2x2, 3x3) filter transforms of conv_winograd.cpp, internal to kernels/cpu: the
// arithmetic of U = G g G^T (the forward's and the input gradient's weights) and of
// dg = G^T dU G (the weight gradient), written once for one filter (`double`) and for eight at a
// time (`Doubles8`). conv_winograd.cpp walks the filters, stores the results and chooses the path.

#include <array>
#include <cstdint>

namespace ember::kernels::cpu {

// Note [Filter transforms eight at a time]
// The filter transforms (U = G g G^T per filter, and dg = G^T dU G for the weight gradient) run
// in double, rounded once to float: a deep layer has K C filters (262,144 at 512 x 512), and
// scalar double arithmetic made them a tenth of a bf16 Winograd convolution. Each is written once
// as a template on its number type: `double`, or `Doubles8`, eight doubles that GCC's vector
// extension computes in one zmm register with the same operations in the same order (the library
// builds with -ffp-contract=off, so neither fuses a multiply-add), so the eight-at-a-time path on
// eight consecutive input channels gives the scalar path's bits. tests/test_conv_winograd.cpp
// compares the two. With bf16 products the eight-at-a-time path writes U's bf16 pairs directly
// (pair_filter_row in conv_winograd.cpp), never U in float32.
using Doubles8 = double __attribute__((vector_size(64)));
using Floats8 = float __attribute__((vector_size(32)));

// u = G g G^T for g's 9 taps (tap (i, j) at g[3 i + j]): u[xi], xi = 4 i + j.
template <typename V>
[[gnu::always_inline]] inline void filter_transform(const V (&g)[9], V (&u)[16]) {
  V s[4][3];  // G g: 4 rows of 3
  for (int j = 0; j < 3; ++j) {
    const V g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
    s[0][j] = g0;
    s[1][j] = (g0 + g1 + g2) / 2;
    s[2][j] = (g0 - g1 + g2) / 2;
    s[3][j] = g2;
  }
  for (int i = 0; i < 4; ++i) {  // (G g) G^T: row i of 4
    const V r[4] = {s[i][0], (s[i][0] + s[i][1] + s[i][2]) / 2, (s[i][0] - s[i][1] + s[i][2]) / 2, s[i][2]};
    for (int j = 0; j < 4; ++j) u[i * 4 + j] = r[j];
  }
}

// dg = G^T dU G for one filter's 16 values e (xi = 4 i + j at e[xi]): dg[t] for the 9 taps,
// t = 3 i + j.       G^T = | 1 1/2  1/2 0 |
//                                | 0 1/2 -1/2 0 |
//                                | 0 1/2  1/2 1 |
template <typename V>
[[gnu::always_inline]] inline void filter_gradient_transform(const V (&e)[16], V (&dg)[9]) {
  V r[3][4];  // G^T dU
  for (int j = 0; j < 4; ++j) {
    r[0][j] = e[j] + (e[4 + j] + e[8 + j]) / 2;
    r[1][j] = (e[4 + j] - e[8 + j]) / 2;
    r[2][j] = (e[4 + j] + e[8 + j]) / 2 + e[12 + j];
  }
  for (int i = 0; i < 3; ++i) {  // (G^T dU) G
    dg[i * 3 + 0] = r[i][0] + (r[i][1] + r[i][2]) / 2;
    dg[i * 3 + 1] = (r[i][1] - r[i][2]) / 2;
    dg[i * 3 + 2] = (r[i][1] + r[i][2]) / 2 + r[i][3];
  }
}

// r = G g G^T of the filters (k, c0 + l), l < 8, lane l each (Filter: transform_weights's).
template <typename Filter>
[[gnu::always_inline]] inline void filter_transform8(const Filter& filter, int64_t k, int64_t c0, Doubles8 (&r)[16]) {
  Doubles8 g[9];
  for (int l = 0; l < 8; ++l) {
    const std::array<double, 9> f = filter(k, c0 + l);
    for (int i = 0; i < 9; ++i) g[i][l] = f[i];
  }
  filter_transform(g, r);
}

}  // namespace ember::kernels::cpu
