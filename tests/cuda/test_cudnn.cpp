// kernels/cuda/cudnn: ember's cuDNN wrappers against the CPU references — convolution (the
// conv_cases of test_conv.cpp, within the same error bound), pooling and activations (exactly:
// on the emulator the shim computes with the CPU kernels) — plus the algorithm cache, the
// workspace, benchmark mode, and what a bad call turns into. On the SIMT flavour the calls run
// over the emulator's cuDNN shim (kernels/simt/cudnn_shim.cpp), whose counters show what ran and
// whose argument checks are tested here call by call.
//
// Built when cuDNN is there (a GPU build with libcudnn, or SIMT with <cudnn.h>).

#include <cudnn.h>
#include <ember/ember.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../kernels/cpu/conv.h"
#include "../../kernels/cpu/elementwise.h"
#include "../../kernels/cpu/pool.h"
#include "../../kernels/cuda/cudnn.h"
#include "../../kernels/cuda/runtime.h"
#include "conv_check.h"
#include "device_buffer.h"
#include "random_data.h"

#if EMBER_SIMT
#include "../../kernels/simt/cudnn_shim.h"
#endif

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::kernels::Pool2dGeometry;
using ember::testing::abs_of;
using ember::testing::conv_cases;
using ember::testing::ConvCase;
using ember::testing::DeviceBuffer;
using ember::testing::geometry;
using ember::testing::random_vector;
using ember::testing::require_within;
namespace cudnn = ember::kernels::gpu::cudnn;

template <typename T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

template <typename T>
std::vector<T> checked(const DeviceBuffer<T>& b) {
  b.check_guards();
  return b.download();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "(no error)";
}

#if EMBER_SIMT
using ember::simt::cudnn_shim::Pass;
ember::simt::cudnn_shim::Calls shim() { return ember::simt::cudnn_shim::calls(); }
int pass(Pass p) { return static_cast<int>(p); }
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

// Forward (with and without bias) and the three backward passes of g through cuDNN, against the
// direct references.
template <typename T>
void check_conv(const Conv2dGeometry& g, uint64_t seed) {
  const DType dt = dtype_of<T>();
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups, ohw = g.out_h * g.out_w;
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w),
               wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * ohw);
  const std::vector<T> x = random_vector<T>(xn, seed), w = random_vector<T>(wn, seed + 1);
  const std::vector<T> bias = random_vector<T>(static_cast<size_t>(g.c_out), seed + 2);
  const std::vector<T> gy = random_vector<T>(yn, seed + 3);
  DeviceBuffer<T> dx(x), dw(w), db(bias), dgy(gy), dy(yn), dgx(xn), dgw(wn), dgb(static_cast<size_t>(g.c_out));
  for (bool with_bias : {true, false}) {
    cudnn::conv2d_forward(dt, g, dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data());
    std::vector<T> want(yn), bound(yn);
    ember::kernels::cpu::conv2d_forward_reference(dt, g, x.data(), w.data(), with_bias ? bias.data() : nullptr,
                                                  want.data());
    ember::kernels::cpu::conv2d_forward_reference(dt, g, abs_of(x).data(), abs_of(w).data(),
                                                  with_bias ? abs_of(bias).data() : nullptr, bound.data());
    require_within(checked(dy), want, bound, cin_g * g.kh * g.kw + 1, "forward");
  }
  cudnn::conv2d_backward_data(dt, g, dgy.data(), dw.data(), dgx.data());
  std::vector<T> want_gx(xn), bound_gx(xn);
  ember::kernels::cpu::conv2d_backward_data_reference(dt, g, gy.data(), w.data(), want_gx.data());
  ember::kernels::cpu::conv2d_backward_data_reference(dt, g, abs_of(gy).data(), abs_of(w).data(), bound_gx.data());
  require_within(checked(dgx), want_gx, bound_gx, cout_g * g.kh * g.kw, "backward data");

  cudnn::conv2d_backward_weight(dt, g, dgy.data(), dx.data(), dgw.data());
  std::vector<T> want_gw(wn), bound_gw(wn);
  ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, gy.data(), x.data(), want_gw.data());
  ember::kernels::cpu::conv2d_backward_weight_reference(dt, g, abs_of(gy).data(), abs_of(x).data(), bound_gw.data());
  require_within(checked(dgw), want_gw, bound_gw, g.n * ohw, "backward weight");

  cudnn::conv2d_backward_bias(dt, g, dgy.data(), dgb.data());
  std::vector<T> want_gb(static_cast<size_t>(g.c_out));
  ember::kernels::cpu::conv2d_backward_bias(dt, g, gy.data(), want_gb.data());
  ember::testing::require_close(checked(dgb), want_gb, 1e-12, std::numeric_limits<T>::epsilon(), "backward bias");
}

Pool2dGeometry pool_geometry(int64_t planes, int64_t in_h, int64_t in_w, int64_t k, int64_t s, int64_t p,
                             bool ceil_mode) {
  Pool2dGeometry g;
  g.planes = planes, g.in_h = in_h, g.in_w = in_w, g.kernel_h = g.kernel_w = k, g.stride_h = g.stride_w = s;
  g.pad_h = g.pad_w = p;
  g.out_h = ember::kernels::pool_output_size(in_h, k, p, s, 1, ceil_mode);
  g.out_w = ember::kernels::pool_output_size(in_w, k, p, s, 1, ceil_mode);
  return g;
}

}  // namespace

TEST_CASE("cudnn is available, and enabled unless EMBER_CUDNN=0", "[cuda][cudnn]") {
  REQUIRE(cudnn::available());
  const char* v = std::getenv("EMBER_CUDNN");
  const bool off = v != nullptr && std::strcmp(v, "0") == 0;
  CHECK(cudnn::enabled() == !off);
  CHECK(cudnn::use_for_conv() == !off);
  // Pooling: only windows cuDNN computes the same way (floor output size, no dilation).
  CHECK(cudnn::use_for_pool(pool_geometry(2, 8, 8, 2, 2, 0, false)) == !off);
  CHECK_FALSE(cudnn::use_for_pool(pool_geometry(2, 7, 7, 2, 2, 0, true)));    // ceil_mode adds a window
  CHECK(cudnn::use_for_pool(pool_geometry(2, 8, 8, 2, 2, 0, true)) == !off);  // ceil_mode adds none
  Pool2dGeometry dilated = pool_geometry(2, 9, 9, 3, 1, 0, false);
  dilated.dilation_h = dilated.dilation_w = 2;
  CHECK_FALSE(cudnn::use_for_pool(dilated));
}

TEMPLATE_TEST_CASE("cudnn conv2d forward and backward match the direct references", "[cuda][cudnn]", float, double) {
  using T = TestType;
  uint64_t seed = 40;
#if EMBER_SIMT
  const auto before = shim();
#endif
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    check_conv<T>(c.g, seed);
    seed += 4;
  }
#if EMBER_SIMT
  // Every pass went through the shim: two forwards (bias added with cudnnAddTensor) per case.
  const auto after = shim();
  const auto n = static_cast<int64_t>(conv_cases().size());
  CHECK(after.convolution[pass(Pass::Forward)] - before.convolution[pass(Pass::Forward)] == 2 * n);
  CHECK(after.convolution[pass(Pass::BackwardData)] - before.convolution[pass(Pass::BackwardData)] == n);
  CHECK(after.convolution[pass(Pass::BackwardFilter)] - before.convolution[pass(Pass::BackwardFilter)] == n);
  CHECK(after.add_tensor - before.add_tensor == n);
  CHECK(after.backward_bias - before.backward_bias == n);
#endif
}

#if EMBER_SIMT
TEST_CASE("cudnn picks the heuristics' first supported algorithm, skipping unsupported ones", "[cuda][cudnn]") {
  // The heuristics' ranking (benchmark mode, under EMBER_CUDNN_BENCHMARK=1, ranks by time).
  const bool was = cudnn::benchmark();
  cudnn::set_benchmark(false);
  // 3x3, stride 1, float32: Winograd (non-fused) ranks first.
  check_conv<float>(geometry(1, 2, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1), 1);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  CHECK(shim().last_algorithm[pass(Pass::BackwardData)] == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
  CHECK(shim().last_algorithm[pass(Pass::BackwardFilter)] == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED);
  // Strided and dilated: Winograd and FFT report NOT_SUPPORTED, so ember's ranking drops them and
  // GEMM runs (ALGO_1 for the backward passes).
  check_conv<float>(geometry(2, 4, 11, 10, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2), 2);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
  CHECK(shim().last_algorithm[pass(Pass::BackwardData)] == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  CHECK(shim().last_algorithm[pass(Pass::BackwardFilter)] == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  // float64: Winograd and FFT are float32-only.
  check_conv<double>(geometry(1, 2, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1), 3);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
  cudnn::set_benchmark(was);
}
#endif

TEST_CASE("cudnn algorithm cache: one choice per problem and pass, asked of cuDNN once", "[cuda][cudnn]") {
  // A shape no other test uses.
  const Conv2dGeometry g = geometry(1, 3, 7, 5, 2, 2, 3, 1, 1, 0, 1, 1, 1, 1);
  const int64_t cached0 = cudnn::cached_algorithm_count();
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  check_conv<float>(g, 7);
  CHECK(cudnn::cached_algorithm_count() == cached0 + 3);  // forward, backward data, backward filter
#if EMBER_SIMT
  const auto s1 = shim();
  for (int p = 0; p < 3; ++p) {
    INFO("pass " << p << (cudnn::benchmark() ? " (benchmark mode: Find)" : " (heuristics)"));
    const int64_t asked_get = s1.get_algorithm[p] - s0.get_algorithm[p];
    const int64_t asked_find = s1.find_algorithm[p] - s0.find_algorithm[p];
    CHECK(asked_get == (cudnn::benchmark() ? 0 : 1));
    CHECK(asked_find == (cudnn::benchmark() ? 1 : 0));
  }
#endif
  // The same problem again: answered from the cache.
  check_conv<float>(g, 8);
  CHECK(cudnn::cached_algorithm_count() == cached0 + 3);
#if EMBER_SIMT
  const auto s2 = shim();
  for (int p = 0; p < 3; ++p) {
    CHECK(s2.get_algorithm[p] == s1.get_algorithm[p]);
    CHECK(s2.find_algorithm[p] == s1.find_algorithm[p]);
    CHECK(s2.convolution[p] > s1.convolution[p]);
  }
  // TF32 math is part of the key too: asked again. (The shim computes TF32 in full float32, so
  // the float32 bound still holds; a GPU's TF32 would not meet it.)
  cudnn::set_allow_tf32(true);
  check_conv<float>(g, 9);
  cudnn::set_allow_tf32(false);
  CHECK_FALSE(cudnn::allow_tf32());
  CHECK(cudnn::cached_algorithm_count() == cached0 + 6);
#endif
}

#if EMBER_SIMT
// Not in the benchmark-mode run (cuda-cudnn-benchmark:), where Find has sized the workspace first.
TEST_CASE("cudnn workspace: grows to the largest need, then is reused", "[cuda][cudnn][cudnn_workspace]") {
  REQUIRE_FALSE(cudnn::benchmark());
  // Larger than every other problem of this program: Winograd's workspace for it is megabytes.
  const Conv2dGeometry g = geometry(4, 16, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  Objects o;
  o.conv3x3(4, 16, 40, 40, 16);
  const auto ranking = o.forward_ranking();
  REQUIRE(!ranking.empty());
  REQUIRE(ranking[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  const size_t need = ranking[0].memory;
  REQUIRE(need > (size_t{1} << 20));
  const std::vector<float> x = random_vector<float>(static_cast<size_t>(4 * 16 * 1600), 1);
  const std::vector<float> w = random_vector<float>(static_cast<size_t>(16 * 16 * 9), 2);
  DeviceBuffer<float> dx(x), dw(w), dy(static_cast<size_t>(4 * 16 * 1600));
  const auto m0 = ember::cuda::memory_stats(0);
  cudnn::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  const auto m1 = ember::cuda::memory_stats(0);
  CHECK(shim().last_workspace_bytes[pass(Pass::Forward)] == need);
  CHECK(m1.allocation_count > m0.allocation_count);  // the workspace grew ...
  CHECK(m1.allocated_bytes >= static_cast<int64_t>(need));
  CHECK(m1.allocated_bytes > m0.allocated_bytes);
  cudnn::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  CHECK(ember::cuda::memory_stats(0).allocation_count == m1.allocation_count);  // ... once
  std::vector<float> want(static_cast<size_t>(4 * 16 * 1600)), bound(want.size());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), abs_of(w).data(), nullptr,
                                                bound.data());
  require_within(checked(dy), want, bound, 16 * 9, "forward");
}

// Run by ctest as cuda-cudnn-lowmem:workspace_fallback, with a 64 MiB emulated device.
TEST_CASE("cudnn: when the workspace cannot grow, the next algorithm that needs less runs", "[.cudnn_lowmem]") {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  INFO("run with EMBER_SIMT_DEVICE_MEMORY of at most 1 GiB (ctest cuda-cudnn-lowmem:workspace_fallback)");
  REQUIRE(total <= (size_t{1} << 30));
  cudnn::set_benchmark(false);
  const Conv2dGeometry g = geometry(8, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  Objects o;
  o.conv3x3(8, 16, 32, 32, 16);
  const auto ranking = o.forward_ranking();
  REQUIRE(ranking.size() >= 2);
  REQUIRE(ranking[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  REQUIRE(ranking[1].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
  REQUIRE(ranking[1].memory == 0);
  const std::vector<float> x = random_vector<float>(static_cast<size_t>(8 * 16 * 1024), 3);
  const std::vector<float> w = random_vector<float>(static_cast<size_t>(16 * 16 * 9), 4);
  DeviceBuffer<float> dx(x), dw(w), dy(static_cast<size_t>(8 * 16 * 1024));
  // Leave less free memory than the first algorithm's workspace.
  ember::cuda::empty_cache(0);
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(free_bytes > ranking[0].memory);
  void* filler = nullptr;
  REQUIRE(cudaMalloc(&filler, free_bytes - ranking[0].memory / 2) == cudaSuccess);
  const auto m0 = ember::cuda::memory_stats(0);
  cudnn::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  CHECK(ember::cuda::memory_stats(0).oom_count > m0.oom_count);
  CHECK(shim().last_algorithm[pass(Pass::Forward)] == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
  std::vector<float> want(static_cast<size_t>(8 * 16 * 1024)), bound(want.size());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), nullptr, want.data());
  ember::kernels::cpu::conv2d_forward_reference(DType::f32, g, abs_of(x).data(), abs_of(w).data(), nullptr,
                                                bound.data());
  require_within(checked(dy), want, bound, 16 * 9, "forward after the fallback");
  // Benchmark mode with memory this short: Find's workspace halves from 1 GiB until one fits (or
  // none does), and Find ranks only what ran in it.
  cudnn::set_benchmark(true);
  const auto s0 = shim();
  const Conv2dGeometry g2 = geometry(2, 4, 12, 12, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  check_conv<float>(g2, 5);
  cudnn::set_benchmark(false);
  CHECK(shim().find_algorithm[pass(Pass::Forward)] == s0.find_algorithm[pass(Pass::Forward)] + 1);
  REQUIRE(cudaFree(filler) == cudaSuccess);
}
#endif

TEMPLATE_TEST_CASE("cudnn pooling equals the CPU kernels (max and average, both paddings)", "[cuda][cudnn]", float,
                   double) {
  using T = TestType;
  const DType dt = dtype_of<T>();
  struct Case {
    const char* name;
    Pool2dGeometry g;
  };
  const std::vector<Case> cases = {
      {"2x2 stride 2", pool_geometry(3, 8, 10, 2, 2, 0, false)},
      {"3x3 stride 2 pad 1 (overlapping)", pool_geometry(2, 9, 11, 3, 2, 1, false)},
      {"3x3 stride 1 pad 1", pool_geometry(2, 7, 5, 3, 1, 1, false)},
      {"2x2 stride 2 ceil_mode without an extra window", pool_geometry(2, 8, 6, 2, 2, 0, true)},
  };
  uint64_t seed = 60;
#if EMBER_SIMT
  const auto s0 = shim();
#endif
  for (const Case& c : cases) {
    INFO(c.name);
    const Pool2dGeometry& g = c.g;
    const size_t in_n = static_cast<size_t>(g.planes * g.in_h * g.in_w),
                 out_n = static_cast<size_t>(g.planes * g.out_h * g.out_w);
    for (bool ties : {false, true}) {
      const std::vector<T> x = ties ? ember::testing::random_ties<T>(in_n, seed) : random_vector<T>(in_n, seed);
      const std::vector<T> go = random_vector<T>(out_n, seed + 1);
      seed += 2;
      DeviceBuffer<T> dx(x), dout(out_n), dgo(go), dgi(in_n);
      // Max: values, and the gradient to the first maximum of each window (as the indices say).
      cudnn::max_pool2d_forward(dt, g, dx.data(), dout.data());
      std::vector<T> want(out_n), want_gi(in_n);
      std::vector<int64_t> idx(out_n);
      ember::kernels::cpu::max_pool2d_forward(dt, g, x.data(), want.data(), idx.data());
      ember::testing::require_close(checked(dout), want, 0, 0, "max forward");
      cudnn::max_pool2d_backward(dt, g, dx.data(), dout.data(), dgo.data(), dgi.data());
      ember::kernels::cpu::max_pool2d_backward(dt, g, go.data(), idx.data(), want_gi.data());
      ember::testing::require_close(checked(dgi), want_gi, 0, 0, "max backward");
      for (bool include_pad : {true, false}) {
        cudnn::avg_pool2d_forward(dt, g, include_pad, dx.data(), dout.data());
        ember::kernels::cpu::avg_pool2d_forward(dt, g, include_pad, x.data(), want.data());
        ember::testing::require_close(checked(dout), want, 0, 0, "avg forward");
        cudnn::avg_pool2d_backward(dt, g, include_pad, dx.data(), dout.data(), dgo.data(), dgi.data());
        ember::kernels::cpu::avg_pool2d_backward(dt, g, include_pad, go.data(), want_gi.data());
        ember::testing::require_close(checked(dgi), want_gi, 0, 0, "avg backward");
      }
    }
  }
#if EMBER_SIMT
  const auto s1 = shim();
  CHECK(s1.pooling_forward - s0.pooling_forward == static_cast<int64_t>(cases.size()) * 2 * 3);
  CHECK(s1.pooling_backward - s0.pooling_backward == static_cast<int64_t>(cases.size()) * 2 * 3);
#endif
  // NaN wins a max window and spreads through an average one.
  const Pool2dGeometry g = pool_geometry(1, 6, 6, 3, 2, 1, false);
  std::vector<T> x = random_vector<T>(36, 3);
  x[7] = std::numeric_limits<T>::quiet_NaN();
  DeviceBuffer<T> dx(x), dout(static_cast<size_t>(g.out_h * g.out_w));
  std::vector<T> want(dout.size());
  std::vector<int64_t> idx(dout.size());
  cudnn::max_pool2d_forward(dt, g, dx.data(), dout.data());
  ember::kernels::cpu::max_pool2d_forward(dt, g, x.data(), want.data(), idx.data());
  ember::testing::require_close(checked(dout), want, 0, 0, "max forward with NaN");
  cudnn::avg_pool2d_forward(dt, g, false, dx.data(), dout.data());
  ember::kernels::cpu::avg_pool2d_forward(dt, g, false, x.data(), want.data());
  ember::testing::require_close(checked(dout), want, 0, 0, "avg forward with NaN");
}

TEMPLATE_TEST_CASE("cudnn activations equal the CPU kernels (ReLU, sigmoid, tanh)", "[cuda][cudnn]", float, double) {
  using T = TestType;
  const DType dt = dtype_of<T>();
  const size_t n = 1000;
  std::vector<T> x = random_vector<T>(n, 11, -6.0, 6.0);
  x[3] = 0;
  x[4] = std::numeric_limits<T>::quiet_NaN();
  x[5] = std::numeric_limits<T>::infinity();
  x[6] = -std::numeric_limits<T>::infinity();
  const std::vector<T> gy = random_vector<T>(n, 12);
  DeviceBuffer<T> dx(x), dy(n), dgy(gy), dgx(n);
  const struct {
    cudnn::Activation a;
    ember::kernels::UnaryOp op;
    const char* name;
  } acts[] = {{cudnn::Activation::Relu, ember::kernels::UnaryOp::Relu, "relu"},
              {cudnn::Activation::Sigmoid, ember::kernels::UnaryOp::Sigmoid, "sigmoid"},
              {cudnn::Activation::Tanh, ember::kernels::UnaryOp::Tanh, "tanh"}};
  ember::kernels::IterShape shape;
  shape.ndim = 1;
  shape.sizes[0] = static_cast<int64_t>(n);
  auto operand = [](const void* p) {
    ember::kernels::Operand o;
    o.data = const_cast<void*>(p);
    o.strides[0] = 1;
    return o;
  };
  for (const auto& act : acts) {
    INFO(act.name);
    cudnn::activation_forward(act.a, dt, static_cast<int64_t>(n), dx.data(), dy.data());
    std::vector<T> want(n), want_gx(n);
    ember::kernels::cpu::unary(act.op, dt, shape, operand(want.data()), operand(x.data()), 0.0);
    ember::testing::require_close(checked(dy), want, 0, 0, "forward");
    cudnn::activation_backward(act.a, dt, static_cast<int64_t>(n), dx.data(), dy.data(), dgy.data(), dgx.data());
    ember::kernels::cpu::unary_backward(act.op, dt, shape, operand(want_gx.data()), operand(gy.data()),
                                        operand(x.data()), operand(want.data()), 0.0);
    ember::testing::require_close(checked(dgx), want_gx, 0, 0, "backward");
  }
  // Empty: nothing to do, nothing written.
  cudnn::activation_forward(cudnn::Activation::Relu, dt, 0, dx.data(), dy.data());
  dy.check_guards();
}

TEST_CASE("cudnn conv2d: an empty batch gives zero weight and bias gradients", "[cuda][cudnn]") {
  const Conv2dGeometry g = geometry(0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  DeviceBuffer<float> dx(1), dw(static_cast<size_t>(4 * 3 * 9)), dy(1), dgw(static_cast<size_t>(4 * 3 * 9)), dgb(4);
  cudnn::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data());
  cudnn::conv2d_backward_data(DType::f32, g, dy.data(), dw.data(), dx.data());
  cudnn::conv2d_backward_weight(DType::f32, g, dy.data(), dx.data(), dgw.data());
  cudnn::conv2d_backward_bias(DType::f32, g, dy.data(), dgb.data());
  ember::testing::require_close(checked(dgw), std::vector<float>(static_cast<size_t>(4 * 3 * 9), 0.0f), 0, 0, "gw");
  ember::testing::require_close(checked(dgb), std::vector<float>(4, 0.0f), 0, 0, "gb");
  dx.check_guards();
  dy.check_guards();
  // Zero planes of pooling: no call at all.
  Pool2dGeometry pg = pool_geometry(0, 4, 4, 2, 2, 0, false);
  cudnn::max_pool2d_forward(DType::f32, pg, dx.data(), dy.data());
  cudnn::avg_pool2d_backward(DType::f32, pg, true, dx.data(), dy.data(), dy.data(), dx.data());
  dx.check_guards();
  dy.check_guards();
}

TEST_CASE("cudnn: a call cuDNN rejects is an ember error naming the call and the status", "[cuda][cudnn]") {
  // 3 input channels cannot be split into 2 groups: the filter descriptor says 1 channel per
  // group, 1 x 2 != 3, and cuDNN's first look at the problem says BAD_PARAM.
  Conv2dGeometry g = geometry(1, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  g.groups = 2;
  DeviceBuffer<float> dx(75), dw(18), dy(50);
  const std::string msg =
      error_of([&] { cudnn::conv2d_forward(DType::f32, g, dx.data(), dw.data(), nullptr, dy.data()); });
  INFO(msg);
  CHECK(msg.find(cudnn::benchmark() ? "cudnnFindConvolutionForwardAlgorithmEx"
                                    : "cudnnGetConvolutionForwardAlgorithm_v7") != std::string::npos);
  CHECK(msg.find("CUDNN_STATUS_BAD_PARAM") != std::string::npos);
  CHECK(msg.find("cudnn.cu") != std::string::npos);
  // A dtype cuDNN is not asked about.
  const std::string bad_type =
      error_of([&] { cudnn::activation_forward(cudnn::Activation::Relu, DType::i32, 4, dx.data(), dy.data()); });
  CHECK(bad_type.find("unsupported dtype") != std::string::npos);
  // Pooling with an output size that is not cuDNN's (a ceil_mode window): NOT_SUPPORTED.
  const Pool2dGeometry pg = pool_geometry(1, 7, 7, 2, 2, 0, true);
  const std::string pool_msg = error_of([&] { cudnn::avg_pool2d_forward(DType::f32, pg, true, dx.data(), dy.data()); });
  INFO(pool_msg);
  CHECK(pool_msg.find("cudnnPoolingForward") != std::string::npos);
  CHECK(pool_msg.find("CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
}

#if EMBER_SIMT
TEST_CASE("cudnn shim: arguments are checked as cuDNN documents them", "[cuda][cudnn]") {
  Objects o;
  CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)) == "CUDNN_STATUS_BAD_PARAM");
  // Descriptors.
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 2, 3, 3) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, static_cast<cudnnDataType_t>(99), 1, 2, 3, 3) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, static_cast<cudnnTensorFormat_t>(7), CUDNN_DATA_FLOAT, 1, 2, 3, 3) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 65536, 65536, 1, 1) ==
        CUDNN_STATUS_NOT_SUPPORTED);  // over 2^31 - 1 elements
  CHECK(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 0, 2, 3, 3) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);  // stride 0
  CHECK(cudnnSetConvolution2dDescriptor(o.conv, -1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);  // negative padding
  CHECK(cudnnSetConvolutionGroupCount(o.conv, 0) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolutionMathType(o.conv, static_cast<cudnnMathType_t>(9)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 0, 2, 0, 0, 2, 2) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetActivationDescriptor(o.act, static_cast<cudnnActivationMode_t>(42), CUDNN_PROPAGATE_NAN, 0) ==
        CUDNN_STATUS_BAD_PARAM);

  // A consistent problem, then one thing wrong at a time.
  o.conv3x3(1, 2, 5, 5, 3);
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  auto heuristics = [&] {
    return cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                  perf);
  };
  REQUIRE(heuristics() == CUDNN_STATUS_SUCCESS);
  REQUIRE(count == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  // Every algorithm is listed; DIRECT is never supported.
  bool direct_listed = false;
  for (int i = 0; i < count; ++i) {
    if (perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) {
      direct_listed = true;
      CHECK(perf[i].status == CUDNN_STATUS_NOT_SUPPORTED);
    }
  }
  CHECK(direct_listed);
  // The workspace-size queries agree with the ranking, and refuse what it marks unsupported.
  for (int i = 0; i < count; ++i) {
    size_t bytes = 0;
    const cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(o.h, o.x, o.w, o.conv, o.y, perf[i].algo, &bytes);
    CHECK(st == perf[i].status);
    if (st == CUDNN_STATUS_SUCCESS) CHECK(bytes == perf[i].memory);
  }
  size_t data_bytes = 1, filter_bytes = 1;
  CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(o.h, o.w, o.y, o.conv, o.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                                                     &data_bytes) == CUDNN_STATUS_SUCCESS);
  CHECK(data_bytes == 0);
  CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(o.h, o.x, o.y, o.conv, o.w,
                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
                                                       &filter_bytes) == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, 0, &count, perf) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 4, 3, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // filter channels != input channels
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 3, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // data types differ
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 9, 9) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // filter larger than the padded input
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 4, 5) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_NOT_SUPPORTED);  // y is not the computed output size
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 5, 5) == CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_BAD_PARAM);  // batch differs
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 5, 5) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(heuristics() == CUDNN_STATUS_NOT_SUPPORTED);  // float data with a double compute type
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(heuristics() == CUDNN_STATUS_SUCCESS);

  // Execution: the algorithm, the workspace, the memory.
  DeviceBuffer<float> x(random_vector<float>(50, 1)), w(random_vector<float>(54, 2)), y(75), ws(1 << 14);
  const float one = 1, zero = 0;
  auto forward = [&](cudnnConvolutionFwdAlgo_t algo, void* wsp, size_t bytes, const void* xp) {
    return cudnnConvolutionForward(o.h, &one, o.x, xp, o.w, w.data(), o.conv, algo, wsp, bytes, &zero, o.y, y.data());
  };
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, x.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, nullptr, 0, x.data()) == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, 64, x.data()) == CUDNN_STATUS_BAD_PARAM);   // null, size 64
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data(), 4, x.data()) == CUDNN_STATUS_BAD_PARAM);  // too small
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data(), ws.size() * 4, x.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, nullptr) == CUDNN_STATUS_BAD_PARAM);
  // Alignment: data to its element size, the workspace to 16 bytes.
  const void* odd = reinterpret_cast<const char*>(x.data()) + 2;
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, odd) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws.data() + 1, (ws.size() - 1) * 4, x.data()) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  const std::vector<float> host(50);
  CHECK(forward(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, host.data()) ==
        CUDNN_STATUS_EXECUTION_FAILED);  // not device memory
  CHECK(cudnnConvolutionForward(o.h, nullptr, o.x, x.data(), o.w, w.data(), o.conv,
                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y,
                                y.data()) == CUDNN_STATUS_BAD_PARAM);  // alpha null

  // Bias, pooling and activation shapes.
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<float> bias(3);
  CHECK(cudnnAddTensor(o.h, &one, o.b, bias.data(), &one, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM);  // 2 vs 3
  CHECK(cudnnConvolutionBackwardBias(o.h, &one, o.y, y.data(), &zero, o.b, bias.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(cudnnPoolingForward(o.h, o.pool, &one, o.x, x.data(), &zero, o.y, y.data()) ==
        CUDNN_STATUS_BAD_PARAM);  // channels 2 vs 3
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, x.data(), &zero, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_ELU, CUDNN_PROPAGATE_NAN, 1.0) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, x.data(), &zero, o.x, x.data()) ==
        CUDNN_STATUS_NOT_SUPPORTED);  // the shim computes ReLU, sigmoid and tanh only

  // Handles and descriptors that are not live.
  cudnnHandle_t gone = nullptr;
  REQUIRE(cudnnCreate(&gone) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnDestroy(gone) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetStream(gone, nullptr) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnDestroy(gone) == CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t unset = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&unset) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, unset, x.data(), &zero, unset, x.data()) == CUDNN_STATUS_BAD_PARAM);
  REQUIRE(cudnnDestroyTensorDescriptor(unset) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDestroyTensorDescriptor(unset) == CUDNN_STATUS_BAD_PARAM);
}

TEST_CASE("cudnn shim: alpha and beta blend into the output as cuDNN defines", "[cuda][cudnn]") {
  Objects o;
  o.conv3x3(1, 2, 4, 4, 2);
  const std::vector<float> xv = random_vector<float>(32, 1), wv = random_vector<float>(36, 2);
  const std::vector<float> y0 = random_vector<float>(32, 3);
  DeviceBuffer<float> x(xv), w(wv), y(y0), nan_y(std::vector<float>(32, std::numeric_limits<float>::quiet_NaN()));
  const float alpha = 2.0f, beta = 0.5f, one = 1.0f, zero = 0.0f;
  std::vector<float> conv(32);
  const Conv2dGeometry g = geometry(1, 2, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  ember::kernels::cpu::conv2d_forward(DType::f32, g, xv.data(), wv.data(), nullptr, conv.data());
  REQUIRE(cudnnConvolutionForward(o.h, &alpha, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &beta, o.y,
                                  y.data()) == CUDNN_STATUS_SUCCESS);
  std::vector<float> want(32);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * conv[i] + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "conv alpha/beta");
  // beta = 0: the output is not read, so the NaN in it is gone.
  REQUIRE(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y,
                                  nan_y.data()) == CUDNN_STATUS_SUCCESS);
  ember::testing::require_close(checked(nan_y), conv, 0, 0, "conv beta 0");
  // Bias: C = alpha A + beta C, A broadcast.
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<float> bias(std::vector<float>{1.0f, -2.0f});
  y.upload(y0);
  REQUIRE(cudnnAddTensor(o.h, &alpha, o.b, bias.data(), &beta, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * (i < 16 ? 1.0f : -2.0f) + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "add tensor");
  // Bias gradient, activation and pooling with alpha 2, beta 0.5.
  DeviceBuffer<float> db(std::vector<float>{4.0f, 8.0f});
  REQUIRE(cudnnConvolutionBackwardBias(o.h, &alpha, o.y, y.data(), &beta, o.b, db.data()) == CUDNN_STATUS_SUCCESS);
  double s0 = 0, s1 = 0;
  for (size_t i = 0; i < 16; ++i) s0 += want[i], s1 += want[16 + i];
  ember::testing::require_close(
      checked(db), std::vector<float>{alpha * static_cast<float>(s0) + 2.0f, alpha * static_cast<float>(s1) + 4.0f},
      1e-5, 1e-6, "bias gradient");
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  y.upload(y0);
  REQUIRE(cudnnActivationForward(o.h, o.act, &alpha, o.x, x.data(), &beta, o.x, y.data()) == CUDNN_STATUS_SUCCESS);
  for (size_t i = 0; i < 32; ++i) want[i] = alpha * (xv[i] <= 0 ? 0.0f : xv[i]) + beta * y0[i];
  ember::testing::require_close(checked(y), want, 0, 0, "relu alpha/beta");
  REQUIRE(cudnnSetPooling2dDescriptor(o.pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN, 2, 2, 0,
                                      0, 2, 2) == CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t pooled = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&pooled) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(pooled, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 2, 2) == CUDNN_STATUS_SUCCESS);
  const std::vector<float> p0 = random_vector<float>(8, 4);
  DeviceBuffer<float> p(p0);
  REQUIRE(cudnnPoolingForward(o.h, o.pool, &alpha, o.x, x.data(), &beta, pooled, p.data()) == CUDNN_STATUS_SUCCESS);
  Pool2dGeometry pg = pool_geometry(2, 4, 4, 2, 2, 0, false);
  std::vector<float> avg(8);
  ember::kernels::cpu::avg_pool2d_forward(DType::f32, pg, true, xv.data(), avg.data());
  for (size_t i = 0; i < 8; ++i) want[i] = alpha * avg[i] + beta * p0[i];
  want.resize(8);
  ember::testing::require_close(checked(p), want, 0, 0, "pooling alpha/beta");
  REQUIRE(cudnnDestroyTensorDescriptor(pooled) == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("cudnn serves the layers: conv2d, max/avg pooling and activations, unless EMBER_CUDNN=0",
          "[cuda][cudnn][cudnn_layers]") {
  using namespace ember;
  const Device dev = Device::cuda(0);
  Generator gen(7);
  const Tensor x = randn({2, 3, 8, 8}, {}, gen).to(dev).requires_grad_(true);
  const Tensor w = randn({4, 3, 3, 3}, {}, gen).to(dev).requires_grad_(true);
  const Tensor b = randn({4}, {}, gen).to(dev).requires_grad_(true);
  const auto s0 = shim();
  Tensor y = conv2d(x, w, b, {.padding = {1, 1}});
  y = relu(y);
  y = max_pool2d(y, {.kernel = {2, 2}});
  y = avg_pool2d(tanh(y), {.kernel = {2, 2}});
  y = sigmoid(y);
  sum(y).backward();
  const auto s1 = shim();
  const int64_t expect = cudnn::enabled() ? 1 : 0;
  CHECK(s1.convolution[pass(Pass::Forward)] - s0.convolution[pass(Pass::Forward)] == expect);
  CHECK(s1.convolution[pass(Pass::BackwardData)] - s0.convolution[pass(Pass::BackwardData)] == expect);
  CHECK(s1.convolution[pass(Pass::BackwardFilter)] - s0.convolution[pass(Pass::BackwardFilter)] == expect);
  CHECK(s1.backward_bias - s0.backward_bias == expect);
  CHECK(s1.pooling_forward - s0.pooling_forward == 2 * expect);  // max and avg
  CHECK(s1.pooling_backward - s0.pooling_backward == 2 * expect);
  CHECK(s1.activation_forward - s0.activation_forward == 3 * expect);  // relu, tanh, sigmoid
  CHECK(s1.activation_backward - s0.activation_backward == 3 * expect);
  // A ceil_mode window cuDNN does not have, and a strided input: the hand-written kernels.
  const Tensor odd = randn({1, 2, 7, 7}, {}, gen).to(dev);
  (void)max_pool2d(odd, {.kernel = {2, 2}, .ceil_mode = true});
  (void)relu(odd.transpose(2, 3));
  const auto s2 = shim();
  CHECK(s2.pooling_forward == s1.pooling_forward);
  CHECK(s2.activation_forward == s1.activation_forward);
}
#endif

// ---- 16-bit convolutions (Note [16-bit convolutions] in kernels/cuda/cudnn.h) ------------------

namespace {

// n values drawn in [-1, 1) and rounded to the 16-bit type H.
template <typename H>
std::vector<H> random_16bit(size_t n, uint64_t seed) {
  const std::vector<float> f = random_vector<float>(n, seed);
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

// The double reference of one kernel run on the absolute values too (the bound's S).
struct Reference {
  std::vector<double> want, abs_sum;
};

// Forward (with and without bias) and the three backward passes of g in 16 bits through cuDNN,
// against double references from the same 16-bit inputs.
template <typename H>
void check_conv_16bit(const Conv2dGeometry& g, uint64_t seed) {
  const DType dt = std::is_same_v<H, ember::Half> ? DType::f16 : DType::bf16, f64 = DType::f64;
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups, ohw = g.out_h * g.out_w;
  const size_t xn = static_cast<size_t>(g.n * g.c_in * g.h * g.w),
               wn = static_cast<size_t>(g.c_out * cin_g * g.kh * g.kw);
  const size_t yn = static_cast<size_t>(g.n * g.c_out * ohw), bn = static_cast<size_t>(g.c_out);
  const std::vector<H> x = random_16bit<H>(xn, seed), w = random_16bit<H>(wn, seed + 1);
  const std::vector<H> bias = random_16bit<H>(bn, seed + 2), gy = random_16bit<H>(yn, seed + 3);
  const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(bias), gyd = to_double(gy);
  DeviceBuffer<H> dx(x), dw(w), db(bias), dgy(gy), dy(yn), dgx(xn), dgw(wn), dgb(bn);
  for (bool with_bias : {true, false}) {
    cudnn::conv2d_forward(dt, g, dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data());
    Reference r{std::vector<double>(yn), std::vector<double>(yn)};
    ember::kernels::cpu::conv2d_forward_reference(f64, g, xd.data(), wd.data(), with_bias ? bd.data() : nullptr,
                                                  r.want.data());
    ember::kernels::cpu::conv2d_forward_reference(f64, g, abs_of(xd).data(), abs_of(wd).data(),
                                                  with_bias ? abs_of(bd).data() : nullptr, r.abs_sum.data());
    require_16bit_within(checked(dy), r.want, r.abs_sum, cin_g * g.kh * g.kw + 1,
                         with_bias ? "forward with bias" : "forward");
  }
  cudnn::conv2d_backward_data(dt, g, dgy.data(), dw.data(), dgx.data());
  Reference rx{std::vector<double>(xn), std::vector<double>(xn)};
  ember::kernels::cpu::conv2d_backward_data_reference(f64, g, gyd.data(), wd.data(), rx.want.data());
  ember::kernels::cpu::conv2d_backward_data_reference(f64, g, abs_of(gyd).data(), abs_of(wd).data(),
                                                      rx.abs_sum.data());
  require_16bit_within(checked(dgx), rx.want, rx.abs_sum, cout_g * g.kh * g.kw, "backward data");

  cudnn::conv2d_backward_weight(dt, g, dgy.data(), dx.data(), dgw.data());
  Reference rw{std::vector<double>(wn), std::vector<double>(wn)};
  ember::kernels::cpu::conv2d_backward_weight_reference(f64, g, gyd.data(), xd.data(), rw.want.data());
  ember::kernels::cpu::conv2d_backward_weight_reference(f64, g, abs_of(gyd).data(), abs_of(xd).data(),
                                                        rw.abs_sum.data());
  require_16bit_within(checked(dgw), rw.want, rw.abs_sum, g.n * ohw, "backward weight");

  cudnn::conv2d_backward_bias(dt, g, dgy.data(), dgb.data());
  Reference rb{std::vector<double>(bn), std::vector<double>(bn)};
  ember::kernels::cpu::conv2d_backward_bias(f64, g, gyd.data(), rb.want.data());
  ember::kernels::cpu::conv2d_backward_bias(f64, g, abs_of(gyd).data(), rb.abs_sum.data());
  require_16bit_within(checked(dgb), rb.want, rb.abs_sum, g.n * ohw, "backward bias");
}

}  // namespace

TEMPLATE_TEST_CASE("cudnn conv2d in f16/bf16: float sums, one rounding, against double references",
                   "[cuda][cudnn][low_precision]", ember::Half, ember::BFloat16) {
  using H = TestType;
  uint64_t seed = 140;
#if EMBER_SIMT
  const auto before = shim();
#endif
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    check_conv_16bit<H>(c.g, seed);
    seed += 4;
  }
#if EMBER_SIMT
  // Every pass reached the shim in 16 bits (two forwards per case: with and without bias).
  const auto after = shim();
  const auto n = static_cast<int64_t>(conv_cases().size());
  const bool f16 = std::is_same_v<H, ember::Half>;
  for (Pass p : {Pass::Forward, Pass::BackwardData, Pass::BackwardFilter}) {
    const int64_t f16_calls = after.convolution_f16[pass(p)] - before.convolution_f16[pass(p)];
    const int64_t bf16_calls = after.convolution_bf16[pass(p)] - before.convolution_bf16[pass(p)];
    const int64_t expect = p == Pass::Forward ? 2 * n : n;
    CHECK(f16_calls == (f16 ? expect : 0));
    CHECK(bf16_calls == (f16 ? 0 : expect));
  }
  CHECK(after.add_tensor_16bit - before.add_tensor_16bit == n);
  CHECK(after.backward_bias_16bit - before.backward_bias_16bit == n);
#endif
}

#if EMBER_SIMT
// conv2d on f16/bf16 CUDA tensors reaches cuDNN as 16-bit convolutions, forward and both backward
// passes, and makes no f32 convolution (the widened path made only f32 ones); gradients come out
// in the inputs' dtype. With EMBER_CUDNN=0 the hand-written kernels widen: no cuDNN call at all.
// The bias joins the float sum before the one rounding: with x = (1, 2^-11), w = (1, 1) and bias
// 2^-13, the exact 1 + 2^-11 + 2^-13 rounds to f16's 1 + 2^-10, where rounding the convolution
// first (1 + 2^-11 is a tie, to even: 1) and then the sum (1 + 2^-13) gives 1.
TEST_CASE("cudnn conv2d layer in f16/bf16: native 16-bit convolutions, unless EMBER_CUDNN=0",
          "[cuda][cudnn][cudnn_layers][low_precision]") {
  using namespace ember;
  const Device dev = Device::cuda(0);
  const int64_t expect = cudnn::enabled() ? 1 : 0;
  for (const DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dt);
    Generator gen(11);
    const auto leaf = [&](Shape s) { return randn(s, {}, gen).to(dt).to(dev).requires_grad_(true); };
    const Tensor x = leaf({2, 4, 9, 7}), w = leaf({6, 2, 3, 2}), b = leaf({6});
    const Conv2dOptions opt{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
    const auto s0 = shim();
    const Tensor y = conv2d(x, w, b, opt);
    y.to(DType::f32).sum().backward();
    const auto s1 = shim();
    CHECK(y.dtype() == dt);
    for (const Tensor* t : {&x, &w, &b}) {
      REQUIRE(t->grad().defined());
      CHECK(t->grad().dtype() == dt);
    }
    for (Pass p : {Pass::Forward, Pass::BackwardData, Pass::BackwardFilter}) {
      const int64_t all = s1.convolution[pass(p)] - s0.convolution[pass(p)];
      const int64_t f16 = s1.convolution_f16[pass(p)] - s0.convolution_f16[pass(p)];
      const int64_t bf16 = s1.convolution_bf16[pass(p)] - s0.convolution_bf16[pass(p)];
      CHECK(all == expect);  // no widened f32 convolution besides
      CHECK(f16 == (dt == DType::f16 ? expect : 0));
      CHECK(bf16 == (dt == DType::bf16 ? expect : 0));
    }
    CHECK(s1.backward_bias_16bit - s0.backward_bias_16bit == expect);
    // Against the f32 CPU convolution of the same 16-bit values: one rounding of the float sum.
    const auto f32 = [](const Tensor& t) { return t.detach().to(DType::f32).to(Device::cpu()); };
    const std::vector<float> got = f32(y).to_vector<float>();
    const std::vector<float> want = conv2d(f32(x), f32(w), f32(b), opt).to_vector<float>();
    const double u = dt == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      CHECK(std::fabs(got[i] - want[i]) <= 1.01 * u * std::fabs(want[i]) + 1e-4);
    }
  }
  // One rounding of conv + bias (cuDNN only: the widened path rounds once as well).
  const Tensor x = from_vector<float>({1.0f, std::ldexp(1.0f, -11)}, {1, 2, 1, 1}).to(DType::f16).to(dev);
  const Tensor w = from_vector<float>({1.0f, 1.0f}, {1, 2, 1, 1}).to(DType::f16).to(dev);
  const Tensor b = from_vector<float>({std::ldexp(1.0f, -13)}, {1}).to(DType::f16).to(dev);
  const std::vector<float> y = conv2d(x, w, b).to(DType::f32).to(Device::cpu()).to_vector<float>();
  REQUIRE(y.size() == 1);
  CHECK(y[0] == 1.0f + std::ldexp(1.0f, -10));
}

// What cuDNN refuses of 16-bit convolutions, the shim refuses too: 16-bit data with a double
// compute type and bfloat16 with bfloat16 compute (not in cuDNN's supported configurations:
// NOT_SUPPORTED), and data types that differ between x, w and y (BAD_PARAM). Half data with half
// compute (TRUE_HALF_CONFIG) is cuDNN's but not the shim's (NOT_SUPPORTED); FFT and Winograd are
// float32 only in the shim (Note [The shim's convolution algorithms]), so the heuristics rank them
// unsupported; 16-bit pooling and activations are not computed by the shim.
TEST_CASE("cudnn shim: 16-bit convolutions with float compute only, refusing what cuDNN refuses",
          "[cuda][cudnn][low_precision]") {
  Objects o;
  const auto set = [&](cudnnDataType_t xt, cudnnDataType_t wt, cudnnDataType_t yt, cudnnDataType_t compute) {
    REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, xt, 1, 2, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, yt, 1, 2, 4, 4) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(o.w, wt, CUDNN_TENSOR_NCHW, 2, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, compute) ==
            CUDNN_STATUS_SUCCESS);
  };
  DeviceBuffer<ember::Half> x(random_16bit<ember::Half>(32, 5)), w(random_16bit<ember::Half>(36, 6)), y(32);
  const float one = 1.0f, zero = 0.0f;
  const auto forward = [&] {
    return cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, o.y, y.data());
  };
  const auto heuristics_status = [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    return cudnnGetConvolutionForwardAlgorithm_v7(o.h, o.x, o.w, o.conv, o.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                  perf);
  };
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_SUCCESS);
  for (const cudnnConvolutionFwdAlgoPerf_t& p : o.forward_ranking()) {
    const bool fft_or_winograd = p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
                                 p.algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    if (fft_or_winograd) CHECK(p.status == CUDNN_STATUS_NOT_SUPPORTED);
  }
  CHECK(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                nullptr, 0, &zero, o.y, y.data()) == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_SUCCESS);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_DOUBLE);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(heuristics_status() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_DOUBLE);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16);
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF);  // TRUE_HALF_CONFIG: not the shim's
  CHECK(forward() == CUDNN_STATUS_NOT_SUPPORTED);
  set(CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  CHECK(heuristics_status() == CUDNN_STATUS_BAD_PARAM);
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
  CHECK(forward() == CUDNN_STATUS_BAD_PARAM);
  // A 16-bit pointer off its 2-byte alignment.
  set(CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_FLOAT);
  const void* odd = reinterpret_cast<const char*>(x.data()) + 1;
  CHECK(cudnnConvolutionForward(o.h, &one, o.x, odd, o.w, w.data(), o.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                nullptr, 0, &zero, o.y, y.data()) == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  // 16-bit pooling and activations: not computed by the shim.
  REQUIRE(cudnnSetActivationDescriptor(o.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnActivationForward(o.h, o.act, &one, o.x, x.data(), &zero, o.x, y.data()) == CUDNN_STATUS_NOT_SUPPORTED);
}

// alpha and beta on 16-bit data: out = round(alpha * conv + beta * out), blended in float and
// rounded once; cudnnAddTensor and the bias gradient likewise.
TEST_CASE("cudnn shim: 16-bit alpha/beta blend in float with one rounding", "[cuda][cudnn][low_precision]") {
  using ember::Half;
  Objects o;
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(o.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetFilter4dDescriptor(o.w, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetConvolution2dDescriptor(o.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_SUCCESS);
  // conv = 1 + 2^-11 (a tie in f16), beta * out = 2^-13: one rounding gives 1 + 2^-10.
  DeviceBuffer<Half> x(std::vector<Half>{Half(1.0f), Half(std::ldexp(1.0f, -11))});
  DeviceBuffer<Half> w(std::vector<Half>{Half(1.0f), Half(1.0f)});
  DeviceBuffer<Half> y(std::vector<Half>{Half(std::ldexp(1.0f, -14))});
  const float one = 1.0f, four = 4.0f, zero = 0.0f;
  REQUIRE(cudnnConvolutionForward(o.h, &one, o.x, x.data(), o.w, w.data(), o.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &four, o.y,
                                  y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 1.0f + std::ldexp(1.0f, -10));
  // cudnnAddTensor: y = round(4 * 2^-13 + 1 * (1 + 2^-10)) = round(1 + 2^-10 + 2^-11), a tie
  // between 1 + 2^-10 and 1 + 2^-9, to even: 1 + 2^-9.
  DeviceBuffer<Half> b(std::vector<Half>{Half(std::ldexp(1.0f, -13))});
  REQUIRE(cudnnAddTensor(o.h, &four, o.b, b.data(), &one, o.y, y.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(y)[0]) == 1.0f + std::ldexp(1.0f, -9));
  // Bias gradient of one channel of dy = (1, 2^-11): the float sum 1 + 2^-11 plus beta * db =
  // 4 * 2^-14 rounds once to 1 + 2^-10.
  REQUIRE(cudnnSetTensor4dDescriptor(o.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, 1, 1, 1, 2) == CUDNN_STATUS_SUCCESS);
  DeviceBuffer<Half> db(std::vector<Half>{Half(std::ldexp(1.0f, -14))});
  REQUIRE(cudnnConvolutionBackwardBias(o.h, &one, o.x, x.data(), &four, o.b, db.data()) == CUDNN_STATUS_SUCCESS);
  CHECK(static_cast<float>(checked(db)[0]) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(shim().add_tensor_16bit > 0);
}
#endif
