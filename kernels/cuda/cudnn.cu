// cuDNN wrappers (see Note [cuDNN algorithm choice] in cudnn.h). The legacy descriptor API is
// deprecated in cuDNN 9 but supported; it is confined to this file, so moving to the graph API
// stays a local change.

#include "launch.h"

#include "cudnn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../../core/allocator.h"
#include "../../core/error.h"
#include "conv.h"  // the hand-written bf16 bias gradient
#include "../../core/cuda/runtime.h"

#if EMBER_HAVE_CUDNN
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>
#endif

namespace ember::kernels::gpu::cudnn {

namespace {
std::atomic<bool> g_benchmark{[] {
  const char* v = std::getenv("EMBER_CUDNN_BENCHMARK");
  return v != nullptr && v[0] == '1';
}()};
std::atomic<bool> g_allow_tf32{false};
std::atomic<int> g_max_pool{-1};  // -1: EMBER_CUDNN_MAX_POOL not read yet (it may throw: not at static init)
}  // namespace

bool enabled() {
  // Note [cuDNN or the hand-written kernels]: EMBER_CUDNN=0 turns cuDNN off for every layer.
  static const bool disabled = cuda::env_switch("EMBER_CUDNN", "1", "0");
  return available() && !disabled;
}

bool use_for_conv() { return enabled(); }

bool use_for_pool(const Pool2dGeometry& g) {
  // cuDNN's descriptors hold int dims and at most 2^31 - 1 elements per tensor.
  return enabled() && g.dilation_h == 1 && g.dilation_w == 1 && g.planes * g.in_h * g.in_w <= INT32_MAX &&
         g.out_h == pool_output_size(g.in_h, g.kernel_h, g.pad_h, g.stride_h, 1, false) &&
         g.out_w == pool_output_size(g.in_w, g.kernel_w, g.pad_w, g.stride_w, 1, false);
}

bool use_for_max_pool(const Pool2dGeometry& g) { return max_pool() && use_for_pool(g); }
void set_max_pool(bool on) { g_max_pool = on ? 1 : 0; }
bool max_pool() {
  int v = g_max_pool.load();
  if (v < 0) {
    v = cuda::env_switch("EMBER_CUDNN_MAX_POOL", "0", "1") ? 1 : 0;
    int unread = -1;
    if (!g_max_pool.compare_exchange_strong(unread, v)) v = unread;  // a set_max_pool() meanwhile wins
  }
  return v == 1;
}

const char* layout_name(Layout layout) { return layout == Layout::NHWC ? "NHWC" : "NCHW"; }

void set_benchmark(bool on) { g_benchmark = on; }
bool benchmark() { return g_benchmark; }
void set_allow_tf32(bool on) { g_allow_tf32 = on; }
bool allow_tf32() { return g_allow_tf32; }

#if !EMBER_HAVE_CUDNN

bool available() { return false; }
int64_t cached_algorithm_count() { return 0; }

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  EMBER_THROW(op, ": this build of ember has no cuDNN (the hand-written kernels serve instead)");
}
}  // namespace

void conv2d_forward(DType, Layout, const Conv2dGeometry&, const void*, const void*, const void*, void*) {
  no_cudnn("cudnn conv2d_forward");
}
void conv2d_backward_data(DType, Layout, const Conv2dGeometry&, const void*, const void*, void*) {
  no_cudnn("cudnn conv2d_backward_data");
}
void conv2d_backward_weight(DType, Layout, const Conv2dGeometry&, const void*, const void*, void*) {
  no_cudnn("cudnn conv2d_backward_weight");
}
void conv2d_backward_bias(DType, Layout, const Conv2dGeometry&, const void*, void*) {
  no_cudnn("cudnn conv2d_backward_bias");
}
void avg_pool2d_forward(DType, Layout, int64_t, const Pool2dGeometry&, bool, const void*, void*) {
  no_cudnn("cudnn avg_pool2d");
}
void avg_pool2d_backward(DType, Layout, int64_t, const Pool2dGeometry&, bool, const void*, const void*, const void*,
                         void*) {
  no_cudnn("cudnn avg_pool2d backward");
}
void max_pool2d_forward(DType, Layout, int64_t, const Pool2dGeometry&, const void*, void*) {
  no_cudnn("cudnn max_pool2d");
}
void max_pool2d_backward(DType, Layout, int64_t, const Pool2dGeometry&, const void*, const void*, const void*, void*) {
  no_cudnn("cudnn max_pool2d backward");
}
void activation_forward(Activation, DType, int64_t, const void*, void*) { no_cudnn("cudnn activation"); }
void activation_backward(Activation, DType, int64_t, const void*, const void*, const void*, void*) {
  no_cudnn("cudnn activation backward");
}

#else  // EMBER_HAVE_CUDNN

bool available() { return true; }

namespace {

// "cuDNN call cudnnConvolutionForward failed: CUDNN_STATUS_BAD_PARAM (kernels/cuda/cudnn.cu:NNN)":
// the function is the text of the call up to its '('.
[[noreturn]] void cudnn_failed(cudnnStatus_t status, const char* call, const char* file, int line) {
  const char* paren = std::strchr(call, '(');
  const std::string fn = paren ? std::string(call, static_cast<size_t>(paren - call)) : std::string(call);
  EMBER_THROW("cuDNN call ", fn, " failed: ", cudnnGetErrorString(status), " (", file, ":", line, ")");
}

#define EMBER_CUDNN_CHECK(expr)                                                                                    \
  do {                                                                                                             \
    const cudnnStatus_t ember_cudnn_status_ = (expr);                                                              \
    if (ember_cudnn_status_ != CUDNN_STATUS_SUCCESS) cudnn_failed(ember_cudnn_status_, #expr, __FILE__, __LINE__); \
  } while (0)

cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: EMBER_THROW("cuDNN: unsupported dtype ", dt, " (expected float32, float64, float16 or bfloat16)");
  }
}

// The convolution descriptor's compute type: float for f32 and for 16-bit data (cuDNN's
// PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG, Note [16-bit convolutions]), double for f64.
cudnnDataType_t compute_type(DType dt) { return dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

cudnnTensorFormat_t tensor_format(Layout layout) {
  return layout == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// Note [Channels-last convolutions and pooling]: NHWC for f32, f16 and bf16 only.
void check_layout(const char* op, DType dt, Layout layout) {
  EMBER_CHECK(layout == Layout::NCHW || dt != DType::f64, op,
              ": NHWC (channels-last) float64 is not sent to cuDNN; use NCHW for float64");
}

// One cuDNN handle per device, created on first use and bound to the current stream per call.
cudnnHandle_t handle() {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  const int dev = cuda::current_device();
  cudnnHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = handles.find(dev);
    if (it == handles.end()) {
      EMBER_CUDNN_CHECK(cudnnCreate(&h));
      handles[dev] = h;
    } else {
      h = it->second;
    }
  }
  EMBER_CUDNN_CHECK(cudnnSetStream(h, cuda::current_stream()));
  return h;
}

// ---- RAII descriptors ----------------------------------------------------------------------------

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  // A dense (n, c, h, w) tensor in `layout` (NHWC: strides (h*w*c, 1, w*c, c)).
  TensorDesc(DType dt, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, tensor_format(layout), data_type(dt), static_cast<int>(n),
                                                 static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  // (c_out, c_in / groups, kh, kw); NHWC: (c_out, kh, kw, c_in / groups) in memory.
  FilterDesc(DType dt, Layout layout, const Conv2dGeometry& g) {
    EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, data_type(dt), tensor_format(layout), static_cast<int>(g.c_out),
                                                 static_cast<int>(g.c_in / g.groups), static_cast<int>(g.kh),
                                                 static_cast<int>(g.kw)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

cudnnMathType_t math_type(DType dt) {
  // FMA math keeps float32 convolutions in full float32 (no TF32 tensor cores); 16-bit data may use
  // tensor cores, whose products of 16-bit values are exact and whose sums are in float.
  if (is_low_precision(dt)) return CUDNN_TENSOR_OP_MATH;
  return dt == DType::f32 && allow_tf32() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(DType dt, const Conv2dGeometry& g) {
    EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(g.pad_h), static_cast<int>(g.pad_w), static_cast<int>(g.stride_h),
        static_cast<int>(g.stride_w), static_cast<int>(g.dil_h), static_cast<int>(g.dil_w), CUDNN_CROSS_CORRELATION,
        compute_type(dt)));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(g.groups)));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math_type(dt)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The descriptors of one convolution problem.
struct ConvProblem {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  ConvProblem(DType dt, Layout layout, const Conv2dGeometry& g)
      : x(dt, layout, g.n, g.c_in, g.h, g.w),
        y(dt, layout, g.n, g.c_out, g.out_h, g.out_w),
        w(dt, layout, g),
        conv(dt, g) {}
};

// ---- the algorithm cache and the shared workspace ----------------------------------------------

enum class Pass { Forward, BackwardData, BackwardFilter };

// (pass, device, dtype, layout, tf32, benchmark, the geometry): Note [cuDNN algorithm choice].
using ConvKey = std::tuple<int, int, int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

ConvKey make_key(Pass pass, DType dt, Layout layout, const Conv2dGeometry& g) {
  return ConvKey{static_cast<int>(pass), cuda::current_device(), static_cast<int>(dt), static_cast<int>(layout),
                 allow_tf32(), benchmark(), g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
                 g.pad_w, g.dil_h, g.dil_w, g.groups};
}

// Ranked candidates: (algorithm, workspace bytes), best first.
using Ranking = std::vector<std::pair<int, size_t>>;

std::mutex g_cache_mu;
std::map<ConvKey, Ranking>& algorithm_cache() {
  static std::map<ConvKey, Ranking> cache;
  return cache;
}

// One growable workspace per device, from the caching allocator.
struct Workspace {
  void* ptr = nullptr;
  size_t size = 0;
};
std::mutex g_ws_mu;

// Returns a workspace of at least `bytes` on the current device, or nullptr if it cannot grow.
void* workspace(size_t bytes) {
  static std::map<int, Workspace> spaces;
  if (bytes == 0) return nullptr;
  const int dev = cuda::current_device();
  std::lock_guard<std::mutex> lock(g_ws_mu);
  Workspace& ws = spaces[dev];
  if (ws.size >= bytes) return ws.ptr;
  Allocator& alloc = allocator_for(Device::cuda(dev));
  if (ws.ptr) alloc.deallocate(ws.ptr, ws.size);  // stream-ordered: safe to hand back now
  ws = Workspace{};
  try {
    ws.ptr = alloc.allocate(bytes);
    ws.size = bytes;
  } catch (const Error&) {
    return nullptr;
  }
  return ws.ptr;
}

// The workspace size benchmark mode's Find starts from on the current device (see rank()).
size_t& find_workspace_cap() {
  static std::map<int, size_t> caps;
  std::lock_guard<std::mutex> lock(g_ws_mu);
  return caps.try_emplace(cuda::current_device(), size_t{1} << 30).first->second;
}

// Picks the first ranked algorithm whose workspace can be had, and runs `run(algo, ws, ws_size)`.
template <typename Run>
void run_ranked(const char* op, const Ranking& ranking, Run run) {
  for (const auto& [algo, bytes] : ranking) {
    void* ws = workspace(bytes);
    if (bytes > 0 && ws == nullptr) continue;  // not enough memory: try an algorithm that needs less
    run(algo, ws, bytes);
    return;
  }
  EMBER_THROW(op, ": no cuDNN algorithm fits in the available device memory");
}

template <typename Perf>
Ranking ranking_from(const Perf* perf, int count) {
  Ranking r;
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) r.emplace_back(static_cast<int>(perf[i].algo), perf[i].memory);
  return r;
}

// Heuristic or measured ranking for one pass, cached under its key.
template <typename PerfT, int kMax, typename GetFn, typename FindFn>
const Ranking& rank(const char* op, Pass pass, DType dt, Layout layout, const Conv2dGeometry& g, GetFn get,
                    FindFn find) {
  const ConvKey key = make_key(pass, dt, layout, g);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = algorithm_cache().find(key);
    if (it != algorithm_cache().end()) return it->second;
  }
  PerfT perf[kMax];
  int count = 0;
  // A record-only ledger runs nothing, so it cannot time candidates: it takes the heuristic's
  // ranking and keeps it out of the cache (Note [Launch ledger]).
  const bool record_only = cuda::ledger_record_only();
  if (benchmark() && !record_only) {
    // Find runs every algorithm; give it a workspace of up to 1 GiB, halved while the allocator
    // cannot provide it. The size it settles on is where the device's next Find starts, so a
    // device short of memory is not asked again (and its cache flushed) for every new shape.
    size_t& cap = find_workspace_cap();
    size_t ws_bytes = cap;
    void* ws = nullptr;
    while (ws_bytes >= (size_t{1} << 20) && (ws = workspace(ws_bytes)) == nullptr) ws_bytes /= 2;
    if (ws) cap = ws_bytes;
    cuda::recorded_call(cuda::CallKind::cudnn, "cudnnFindConvolution*AlgorithmEx", cuda::current_stream(),
                        [] { return cuda::Declared(cuda::Cost{}); }, [&] { find(perf, kMax, &count, ws, ws ? ws_bytes : 0); });
  } else {
    get(perf, kMax, &count);
  }
  Ranking r = ranking_from(perf, count);
  EMBER_CHECK(!r.empty(), op, ": cuDNN offers no algorithm for this convolution");
  if (record_only && benchmark()) {
    thread_local Ranking unranked;
    unranked = std::move(r);
    return unranked;
  }
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return algorithm_cache().emplace(key, std::move(r)).first->second;
}

// The alpha = 1 / beta = 0 scalars cuDNN takes by pointer: double for f64, float for f32 and 16-bit data.
struct Blend {
  const void* one;
  const void* zero;
};
Blend blend(DType dt) {
  static const double d1 = 1, d0 = 0;
  static const float f1 = 1, f0 = 0;
  return dt == DType::f64 ? Blend{&d1, &d0} : Blend{&f1, &f0};
}

// ---- declared costs (Note [Launch ledger] in core/cuda/ledger.h) ---------------------------------

// The units a convolution of dt runs on: tensor cores for f16/bf16, and for f32 when TF32 is on.
cuda::Math conv_math(DType dt) {
  if (dt == DType::f16 || dt == DType::bf16) return cuda::Math::tensor_16;
  if (dt == DType::f64) return cuda::Math::fp64;
  return allow_tf32() ? cuda::Math::tensor_tf32 : cuda::Math::cuda_core;
}

// One convolution pass: its two operands read once (and y when a bias was blended in first), its
// result written once, 2 flops per multiply-add; the shape is the calibration key.
cuda::Declared conv_declared(Pass pass, DType dt, Layout layout, const Conv2dGeometry& g, bool reads_result) {
  const double e = dtype_size(dt);
  const double x = double(g.n) * g.c_in * g.h * g.w * e, y = double(g.n) * g.c_out * g.out_h * g.out_w * e;
  const double w = double(g.c_out) * (g.c_in / g.groups) * g.kh * g.kw * e;
  const double flops = 2.0 * g.n * g.c_out * g.out_h * g.out_w * (g.c_in / g.groups) * g.kh * g.kw;
  const char* name = pass == Pass::Forward ? "fwd" : pass == Pass::BackwardData ? "dgrad" : "wgrad";
  cuda::Cost c;
  switch (pass) {
    case Pass::Forward: c = cuda::math_cost(x + w + (reads_result ? y : 0), y, flops, conv_math(dt)); break;
    case Pass::BackwardData: c = cuda::math_cost(y + w, x, flops, conv_math(dt)); break;
    case Pass::BackwardFilter: c = cuda::math_cost(x + y, w, flops, conv_math(dt)); break;
  }
  auto i = [](int64_t v) { return std::to_string(v); };
  return {c, std::string("conv ") + name + " " + dtype_name(dt) + (layout == Layout::NHWC ? " NHWC" : " NCHW") +
                 " n=" + i(g.n) + " c=" + i(g.c_in) + " " + i(g.h) + "x" + i(g.w) + " k=" + i(g.c_out) + " " +
                 i(g.kh) + "x" + i(g.kw) + " s" + i(g.stride_h) + " p" + i(g.pad_h) +
                 (g.dil_h > 1 ? " d" + i(g.dil_h) : "") + (g.groups > 1 ? " g" + i(g.groups) : "")};
}

}  // namespace

int64_t cached_algorithm_count() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return static_cast<int64_t>(algorithm_cache().size());
}

void conv2d_forward(DType dt, Layout layout, const Conv2dGeometry& g, const void* x, const void* w, const void* bias,
                    void* y) {
  check_layout("conv2d", dt, layout);
  if (g.n == 0 || g.c_out == 0) return;
  cudnnHandle_t h = handle();
  ConvProblem p(dt, layout, g);
  const Ranking& r = rank<cudnnConvolutionFwdAlgoPerf_t, 8>(
      "conv2d", Pass::Forward, dt, layout, g,
      [&](cudnnConvolutionFwdAlgoPerf_t* perf, int max, int* count) {
        EMBER_CUDNN_CHECK(
            cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.d, p.w.d, p.conv.d, p.y.d, max, count, perf));
      },
      [&](cudnnConvolutionFwdAlgoPerf_t* perf, int max, int* count, void* ws, size_t ws_bytes) {
        EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x.d, x, p.w.d, w, p.conv.d, p.y.d, y, max,
                                                                 count, perf, ws, ws_bytes));
      });
  const auto [one, zero] = blend(dt);
  // Note [16-bit convolutions]: the bias is broadcast into y first (a copy: no rounding) and the
  // convolution blends onto it with beta = 1, so y = round(conv + bias) with one rounding.
  if (bias != nullptr) {
    TensorDesc b(dt, layout, 1, g.c_out, 1, 1);
    cuda::recorded_call(
        cuda::CallKind::cudnn, "cudnnAddTensor", cuda::current_stream(),
        [&] {
          const double e = dtype_size(dt);
          return cuda::cost(g.c_out * e, double(g.n) * g.c_out * g.out_h * g.out_w * e);
        },
        [&] { EMBER_CUDNN_CHECK(cudnnAddTensor(h, one, b.d, bias, zero, p.y.d, y)); });
  }
  run_ranked("conv2d", r, [&](int algo, void* ws, size_t bytes) {
    cuda::recorded_call(
        cuda::CallKind::cudnn, "cudnnConvolutionForward", cuda::current_stream(),
        [&] { return conv_declared(Pass::Forward, dt, layout, g, bias != nullptr); },
        [&] {
          EMBER_CUDNN_CHECK(cudnnConvolutionForward(h, one, p.x.d, x, p.w.d, w, p.conv.d,
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes,
                                                    bias != nullptr ? one : zero, p.y.d, y));
        });
  });
}

void conv2d_backward_data(DType dt, Layout layout, const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
  check_layout("conv2d backward data", dt, layout);
  if (g.n == 0 || g.c_in == 0) return;
  cudnnHandle_t h = handle();
  ConvProblem p(dt, layout, g);
  const Ranking& r = rank<cudnnConvolutionBwdDataAlgoPerf_t, 8>(
      "conv2d backward data", Pass::BackwardData, dt, layout, g,
      [&](cudnnConvolutionBwdDataAlgoPerf_t* perf, int max, int* count) {
        EMBER_CUDNN_CHECK(
            cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.d, p.y.d, p.conv.d, p.x.d, max, count, perf));
      },
      [&](cudnnConvolutionBwdDataAlgoPerf_t* perf, int max, int* count, void* ws, size_t ws_bytes) {
        EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w.d, w, p.y.d, gy, p.conv.d, p.x.d, gx,
                                                                      max, count, perf, ws, ws_bytes));
      });
  const auto [one, zero] = blend(dt);
  run_ranked("conv2d backward data", r, [&](int algo, void* ws, size_t bytes) {
    cuda::recorded_call(
        cuda::CallKind::cudnn, "cudnnConvolutionBackwardData", cuda::current_stream(),
        [&] { return conv_declared(Pass::BackwardData, dt, layout, g, false); },
        [&] {
          EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(h, one, p.w.d, w, p.y.d, gy, p.conv.d,
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes,
                                                         zero, p.x.d, gx));
        });
  });
}

namespace {

// The weight and bias gradients of an empty batch are sums over nothing: zeros (cuDNN takes no
// tensor with a zero dimension).
void zero_fill(void* p, size_t elems, DType dt) {
  cuda::memset_async(p, 0, elems * static_cast<size_t>(dtype_size(dt)), cuda::current_stream());
}

}  // namespace

void conv2d_backward_weight(DType dt, Layout layout, const Conv2dGeometry& g, const void* gy, const void* x,
                            void* gw) {
  check_layout("conv2d backward weight", dt, layout);
  if (g.c_out == 0) return;
  if (g.n == 0) return zero_fill(gw, static_cast<size_t>(g.c_out * (g.c_in / g.groups) * g.kh * g.kw), dt);
  cudnnHandle_t h = handle();
  ConvProblem p(dt, layout, g);
  const Ranking& r =
      rank<cudnnConvolutionBwdFilterAlgoPerf_t, 8>(
          "conv2d backward weight", Pass::BackwardFilter, dt, layout, g,
          [&](cudnnConvolutionBwdFilterAlgoPerf_t* perf, int max, int* count) {
            EMBER_CUDNN_CHECK(
                cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.d, p.y.d, p.conv.d, p.w.d, max, count, perf));
          },
          [&](cudnnConvolutionBwdFilterAlgoPerf_t* perf, int max, int* count, void* ws, size_t ws_bytes) {
            EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x.d, x, p.y.d, gy, p.conv.d, p.w.d,
                                                                            gw, max, count, perf, ws, ws_bytes));
          });
  const auto [one, zero] = blend(dt);
  run_ranked("conv2d backward weight", r, [&](int algo, void* ws, size_t bytes) {
    cuda::recorded_call(
        cuda::CallKind::cudnn, "cudnnConvolutionBackwardFilter", cuda::current_stream(),
        [&] { return conv_declared(Pass::BackwardFilter, dt, layout, g, false); },
        [&] {
          EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, one, p.x.d, x, p.y.d, gy, p.conv.d,
                                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws,
                                                           bytes, zero, p.w.d, gw));
        });
  });
}

void conv2d_backward_bias(DType dt, Layout layout, const Conv2dGeometry& g, const void* gy, void* gb) {
  check_layout("conv2d backward bias", dt, layout);
  if (g.c_out == 0) return;
  if (g.n == 0) return zero_fill(gb, static_cast<size_t>(g.c_out), dt);
  // cuDNN 9 answers CUDNN_STATUS_NOT_SUPPORTED for bf16 here (seen on an H200, cuDNN 9 from
  // PyTorch's wheel; the emulator's shim answers the same): the hand-written reduction, which
  // sums in float and rounds once like cuDNN's f16 path.
  if (dt == DType::bf16) {
    if (layout == Layout::NHWC) return kernels::gpu::conv2d_backward_bias_nhwc(dt, g, gy, gb);
    return kernels::gpu::conv2d_backward_bias(dt, g, gy, gb);
  }
  cudnnHandle_t h = handle();
  TensorDesc y(dt, layout, g.n, g.c_out, g.out_h, g.out_w), b(dt, layout, 1, g.c_out, 1, 1);
  const auto [one, zero] = blend(dt);
  cuda::recorded_call(
      cuda::CallKind::cudnn, "cudnnConvolutionBackwardBias", cuda::current_stream(),
      [&] {
        const double e = dtype_size(dt), n = double(g.n) * g.c_out * g.out_h * g.out_w;
        return cuda::cost(n * e, g.c_out * e, n);
      },
      [&] { EMBER_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, one, y.d, gy, zero, b.d, gb)); });
}

// ---- pooling and activations -------------------------------------------------------------------

namespace {

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  // Max pooling is the deterministic mode (the backward gathers, as ember's kernels do).
  PoolDesc(const Pool2dGeometry& g, cudnnPoolingMode_t mode) {
    EMBER_CHECK(g.dilation_h == 1 && g.dilation_w == 1, "cuDNN pooling: dilation is not supported");
    EMBER_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    EMBER_CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(g.kernel_h),
                                                  static_cast<int>(g.kernel_w), static_cast<int>(g.pad_h),
                                                  static_cast<int>(g.pad_w), static_cast<int>(g.stride_h),
                                                  static_cast<int>(g.stride_w)));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

struct ActDesc {
  cudnnActivationDescriptor_t d = nullptr;
  explicit ActDesc(Activation a) {
    EMBER_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d));
    const cudnnActivationMode_t mode = a == Activation::Relu      ? CUDNN_ACTIVATION_RELU
                                       : a == Activation::Sigmoid ? CUDNN_ACTIVATION_SIGMOID
                                                                  : CUDNN_ACTIVATION_TANH;
    EMBER_CUDNN_CHECK(cudnnSetActivationDescriptor(d, mode, CUDNN_PROPAGATE_NAN, 0.0));
  }
  ~ActDesc() { cudnnDestroyActivationDescriptor(d); }
  ActDesc(const ActDesc&) = delete;
  ActDesc& operator=(const ActDesc&) = delete;
};

cudnnPoolingMode_t avg_mode(bool count_include_pad) {
  return count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
}

// The images of a pooling call: g.planes / channels of `channels` channels (cudnn.h).
struct PoolImages {
  int64_t n, c;
  PoolImages(const char* op, DType dt, Layout layout, int64_t channels, const Pool2dGeometry& g) {
    check_layout(op, dt, layout);
    EMBER_CHECK(channels > 0 && g.planes % channels == 0, op, ": ", g.planes, " planes are not images of ", channels,
                " channels");
    n = g.planes / channels, c = channels;
  }
};

void pool_forward(const char* op, cudnnPoolingMode_t mode, DType dt, Layout layout, int64_t channels,
                  const Pool2dGeometry& g, const void* x, void* out) {
  if (g.planes == 0) return;
  const PoolImages im(op, dt, layout, channels, g);
  cudnnHandle_t h = handle();
  PoolDesc pd(g, mode);
  TensorDesc xd(dt, layout, im.n, im.c, g.in_h, g.in_w), yd(dt, layout, im.n, im.c, g.out_h, g.out_w);
  const auto [one, zero] = blend(dt);
  cuda::recorded_call(
      cuda::CallKind::cudnn, "cudnnPoolingForward", cuda::current_stream(),
      [&] {
        const double e = dtype_size(dt), in = double(g.planes) * g.in_h * g.in_w, out_n = double(g.planes) * g.out_h * g.out_w;
        return cuda::cost(in * e, out_n * e, out_n * g.kernel_h * g.kernel_w);
      },
      [&] { EMBER_CUDNN_CHECK(cudnnPoolingForward(h, pd.d, one, xd.d, x, zero, yd.d, out)); });
}

void pool_backward(const char* op, cudnnPoolingMode_t mode, DType dt, Layout layout, int64_t channels,
                   const Pool2dGeometry& g, const void* x, const void* out, const void* grad_out, void* grad_in) {
  if (g.planes == 0) return;
  const PoolImages im(op, dt, layout, channels, g);
  cudnnHandle_t h = handle();
  PoolDesc pd(g, mode);
  TensorDesc xd(dt, layout, im.n, im.c, g.in_h, g.in_w), yd(dt, layout, im.n, im.c, g.out_h, g.out_w);
  const auto [one, zero] = blend(dt);
  cuda::recorded_call(
      cuda::CallKind::cudnn, "cudnnPoolingBackward", cuda::current_stream(),
      [&] {
        const double e = dtype_size(dt), in = double(g.planes) * g.in_h * g.in_w, out_n = double(g.planes) * g.out_h * g.out_w;
        return cuda::cost((in + 2 * out_n) * e, in * e, out_n * g.kernel_h * g.kernel_w);
      },
      [&] {
        EMBER_CUDNN_CHECK(cudnnPoolingBackward(h, pd.d, one, yd.d, out, yd.d, grad_out, xd.d, x, zero, xd.d, grad_in));
      });
}

}  // namespace

void avg_pool2d_forward(DType dt, Layout layout, int64_t channels, const Pool2dGeometry& g, bool count_include_pad,
                        const void* x, void* out) {
  pool_forward("cudnn avg_pool2d", avg_mode(count_include_pad), dt, layout, channels, g, x, out);
}

void avg_pool2d_backward(DType dt, Layout layout, int64_t channels, const Pool2dGeometry& g, bool count_include_pad,
                         const void* x, const void* out, const void* grad_out, void* grad_in) {
  pool_backward("cudnn avg_pool2d backward", avg_mode(count_include_pad), dt, layout, channels, g, x, out, grad_out,
                grad_in);
}

void max_pool2d_forward(DType dt, Layout layout, int64_t channels, const Pool2dGeometry& g, const void* x,
                        void* out) {
  pool_forward("cudnn max_pool2d", CUDNN_POOLING_MAX_DETERMINISTIC, dt, layout, channels, g, x, out);
}

void max_pool2d_backward(DType dt, Layout layout, int64_t channels, const Pool2dGeometry& g, const void* x,
                         const void* out, const void* grad_out, void* grad_in) {
  pool_backward("cudnn max_pool2d backward", CUDNN_POOLING_MAX_DETERMINISTIC, dt, layout, channels, g, x, out,
                grad_out, grad_in);
}

void activation_forward(Activation a, DType dt, int64_t n, const void* x, void* y) {
  if (n == 0) return;
  cudnnHandle_t h = handle();
  ActDesc ad(a);
  TensorDesc td(dt, Layout::NCHW, 1, 1, 1, n);
  const auto [one, zero] = blend(dt);
  cuda::recorded_call(
      cuda::CallKind::cudnn, "cudnnActivationForward", cuda::current_stream(),
      [&] { return cuda::cost(double(n) * dtype_size(dt), double(n) * dtype_size(dt), double(n)); },
      [&] { EMBER_CUDNN_CHECK(cudnnActivationForward(h, ad.d, one, td.d, x, zero, td.d, y)); });
}

void activation_backward(Activation a, DType dt, int64_t n, const void* x, const void* y, const void* grad_y,
                         void* grad_x) {
  if (n == 0) return;
  cudnnHandle_t h = handle();
  ActDesc ad(a);
  TensorDesc td(dt, Layout::NCHW, 1, 1, 1, n);
  const auto [one, zero] = blend(dt);
  cuda::recorded_call(
      cuda::CallKind::cudnn, "cudnnActivationBackward", cuda::current_stream(),
      [&] { return cuda::cost(3.0 * n * dtype_size(dt), double(n) * dtype_size(dt), double(n)); },
      [&] {
        EMBER_CUDNN_CHECK(cudnnActivationBackward(h, ad.d, one, td.d, y, td.d, grad_y, td.d, x, zero, td.d, grad_x));
      });
}

#endif  // EMBER_HAVE_CUDNN

}  // namespace ember::kernels::gpu::cudnn
