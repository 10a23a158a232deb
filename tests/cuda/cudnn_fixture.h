#pragma once
// What the cuDNN tests share (test_cudnn.cpp, test_cudnn_16bit.cpp): the dtype of a test type,
// downloads that check the guard bytes, the text of an ember error, the emulator's cuDNN call
// counters, and a set of cuDNN objects for the tests that call cuDNN directly.

#include <cudnn.h>
#include <ember/ember.h>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#include "device_buffer.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

namespace ember::testing::cudnn_fixture {

template <typename T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

template <typename T>
std::vector<T> checked(const DeviceBuffer<T>& b) {
  b.check_guards();
  return b.download();
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "(no error)";
}

#if EMBER_SIMT
using ember::simt::cudnn_shim::Pass;
inline ember::simt::cudnn_shim::Calls shim() { return ember::simt::cudnn_shim::calls(); }
inline int pass(Pass p) { return static_cast<int>(p); }
#endif

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
