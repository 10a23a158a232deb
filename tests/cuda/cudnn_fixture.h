#pragma once
// What the cuDNN tests share (test_cudnn.cpp, test_cudnn_16bit.cpp, test_cudnn_16bit_pool.cpp): the
// text of an ember error, pooling geometries, 16-bit data and the bound of a float sum rounded
// once to 16 bits, the activations with the ember op each matches, the emulator's cuDNN call
// counters, and a set of cuDNN objects for the tests that call cuDNN directly.

#include <cudnn.h>
#include <ember/ember.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#include "../../kernels/cuda/cudnn.h"
#include "../../kernels/elementwise.h"
#include "../../kernels/pool.h"
#include "device_buffer.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

namespace ember::testing::cudnn_fixture {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A square pooling window of size k, stride s and padding p over planes of (in_h, in_w).
inline ember::kernels::Pool2dGeometry pool_geometry(int64_t planes, int64_t in_h, int64_t in_w, int64_t k, int64_t s,
                                                    int64_t p, bool ceil_mode) {
  ember::kernels::Pool2dGeometry g;
  g.planes = planes, g.in_h = in_h, g.in_w = in_w, g.kernel_h = g.kernel_w = k, g.stride_h = g.stride_w = s;
  g.pad_h = g.pad_w = p;
  g.out_h = ember::kernels::pool_output_size(in_h, k, p, s, 1, ceil_mode);
  g.out_w = ember::kernels::pool_output_size(in_w, k, p, s, 1, ceil_mode);
  return g;
}

// n values drawn in [-1, 1) and rounded to the 16-bit type H.
template <typename H>
std::vector<H> random_16bit(size_t n, uint64_t seed) {
  const std::vector<float> f = ember::testing::random_vector<float>(n, seed);
  std::vector<H> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = H(f[i]);
  return r;
}

template <typename H>
std::vector<double> to_double(const std::vector<H>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

// The bound of a 16-bit result from the same 16-bit inputs: the sum of `terms` exact products in
// float (any order) is within 2 terms eps32 S of the exact sum (S the sum of the terms' absolute
// values, as in conv_check.h), and one rounding to H adds at most u |result| (u = 2^-11 for f16,
// 2^-8 for bf16), plus half the spacing of H's subnormals (2^-25 for f16) near zero. So
//   |got - want| <= 2 terms eps32 S (1 + u) + u |want| + tiny.
template <typename H>
void require_16bit_within(const std::vector<H>& got, const std::vector<double>& want,
                          const std::vector<double>& abs_sum, int64_t terms, const std::string& what) {
  REQUIRE(got.size() == want.size());
  const bool f16 = std::is_same_v<H, ember::Half>;
  const double u = f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8), tiny = f16 ? std::ldexp(1.0, -25) : 0.0;
  const double eps32 = std::numeric_limits<float>::epsilon();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<float>(got[i]), w = want[i];
    const double sum_err = 2.0 * static_cast<double>(terms) * eps32 * abs_sum[i];
    INFO(what << " element " << i << ": got " << g << ", want " << w);
    REQUIRE(std::fabs(g - w) <= sum_err * (1 + u) + u * std::fabs(w) + tiny);
  }
}

#if EMBER_SIMT
using ember::simt::cudnn_shim::Pass;
inline ember::simt::cudnn_shim::Calls shim() { return ember::simt::cudnn_shim::calls(); }
inline int pass(Pass p) { return static_cast<int>(p); }
#endif

// cuDNN's activations, each with the ember elementwise op whose forward and backward it must match.
struct ActivationCase {
  ember::kernels::gpu::cudnn::Activation a;
  ember::kernels::UnaryOp op;
  const char* name;
};
inline constexpr ActivationCase kActivations[] = {
    {ember::kernels::gpu::cudnn::Activation::Relu, ember::kernels::UnaryOp::Relu, "relu"},
    {ember::kernels::gpu::cudnn::Activation::Sigmoid, ember::kernels::UnaryOp::Sigmoid, "sigmoid"},
    {ember::kernels::gpu::cudnn::Activation::Tanh, ember::kernels::UnaryOp::Tanh, "tanh"}};

// cuDNN objects of a test that calls cuDNN directly, destroyed at the end.
struct Objects {
  cudnnHandle_t h = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  Objects() {
    REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateTensorDescriptor(&x) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateTensorDescriptor(&y) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateTensorDescriptor(&b) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateFilterDescriptor(&w) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateConvolutionDescriptor(&conv) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreatePoolingDescriptor(&pool) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateActivationDescriptor(&act) == CUDNN_STATUS_SUCCESS);
  }
  ~Objects() {
    cudnnDestroyActivationDescriptor(act);
    cudnnDestroyPoolingDescriptor(pool);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(b);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroy(h);
  }
  // x (n, c, hh, ww) * w (k, c, 3, 3), pad 1, stride 1, float: y (n, k, hh, ww).
  void conv3x3(int n, int c, int hh, int ww, int k) {
    REQUIRE(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, ww) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, hh, ww) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, 3, 3) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
            CUDNN_STATUS_SUCCESS);
  }
  // The heuristics' ranking for the forward problem set by conv3x3.
  std::vector<cudnnConvolutionFwdAlgoPerf_t> forward_ranking() {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    int count = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, static_cast<int>(perf.size()), &count,
                                                   perf.data()) == CUDNN_STATUS_SUCCESS);
    perf.resize(static_cast<size_t>(count));
    return perf;
  }
};

}  // namespace ember::testing::cudnn_fixture
