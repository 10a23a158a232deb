// The cuDNN 9 functions ember calls (kernels/cuda/cudnn.cu), and the workspace-size queries that go
// with them, for the SIMT flavour (compiled only
// there, and only when the real <cudnn.h> is found: with a real GPU, libcudnn is linked instead).
//
// Declarations come from the real <cudnn.h>, so a call site that compiles here compiles against
// cuDNN. Each function checks its arguments the way the cuDNN API reference lists them and returns
// the status cuDNN documents:
//   - a null or destroyed handle or descriptor, a descriptor never set, a null data pointer or
//     scaling factor, a negative or zero size, an enum value outside its type: CUDNN_STATUS_BAD_PARAM
//   - operands whose shapes disagree (input channels against the filter and group count, output
//     channels not a multiple of the groups, batch or channels of x and y, a bias that does not
//     broadcast), data types that differ between operands, a workspace that is null with a
//     nonzero size or smaller than the algorithm needs: CUDNN_STATUS_BAD_PARAM
//   - an output whose spatial size is not the one cuDNN computes (cudnnGetConvolution2dForward-
//     OutputDim, or the floor formula for pooling), a pair of data and compute types outside cuDNN's
//     supported configurations, an algorithm that does not support the problem:
//     CUDNN_STATUS_NOT_SUPPORTED
//   - a data pointer not aligned to its element size, a workspace not aligned to 16 bytes:
//     CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER
//   - an operand that is not device memory (cuDNN would fault on the GPU):
//     CUDNN_STATUS_EXECUTION_FAILED.
// Both print a line on stderr naming the operand.
// The shim computes float32 and float64 in NCHW only, and for convolutions, bias gradients and
// cudnnAddTensor also CUDNN_DATA_HALF and CUDNN_DATA_BFLOAT16 with float compute: the 16-bit
// values are widened to float (exactly), the float computation runs (sums in float, alpha and beta
// applied in float) and each output element is rounded to 16 bits once, as a GPU computing
// PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG does. cuDNN's table has no 16-bit data with a double
// compute type, nor bfloat16 compute: NOT_SUPPORTED, as from cuDNN. TRUE_HALF_CONFIG (half
// compute), other data types, NHWC filters, the CUDNN_CONVOLUTION (flipped) mode, 16-bit pooling
// and activations, activations other than ReLU/sigmoid/tanh and max pooling without NaN
// propagation are CUDNN_STATUS_NOT_SUPPORTED here although cuDNN has them (ember does not use
// them).
//
// A call then waits for the handle's stream (the shim runs on the host, outside the stream order)
// and computes with ember's CPU kernels (kernels/cpu/conv.h, pool.h, elementwise.h), honouring
// alpha and beta as cuDNN does: out = alpha * op(...) + beta * out, where beta == 0 means out is
// not read (it may hold NaN). With alpha = 1 and beta = 0 the result is the CPU kernel's, bit for
// bit.
//
// Note [The shim's convolution algorithms]
// cuDNN computes a convolution with one of several algorithms, each with its own workspace need
// and its own restrictions. The shim keeps a table in that spirit — every algorithm computes the
// same CPU convolution, but each asks for its own workspace (zero for IMPLICIT_GEMM and ALGO_0,
// an im2col buffer for GEMM and ALGO_1, padded transforms for FFT, tiles for Winograd) and refuses
// what cuDNN's versions refuse: DIRECT is never implemented, FFT and Winograd need stride 1 and no
// dilation, Winograd a 3x3 (or 5x5 for the non-fused forward) filter, FFT a padded input of at
// most 256 per side; FFT and Winograd compute float32 only. The heuristics
// (cudnnGet*Algorithm_v7) rank the supported ones in a fixed order, largest workspace first, and
// list the rest with CUDNN_STATUS_NOT_SUPPORTED; Find (cudnnFind*AlgorithmEx) runs each one whose
// workspace fits the one it is given, times it, and sorts by time. So ember's ranking, algorithm
// cache, workspace growth and fallbacks meet the same kinds of answers a GPU gives.

#include "cudnn_shim.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "../../core/dtype.h"
#include "../conv.h"
#include "../cpu/conv.h"
#include "../cpu/elementwise.h"
#include "../cpu/pool.h"
#include "../pool.h"
#include "shim_memory.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
  int window_h = 0, window_w = 0, pad_h = 0, pad_w = 0, stride_h = 0, stride_w = 0;
};
struct cudnnActivationStruct {
  bool set = false;
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
  cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
  double coef = 0;
};

namespace {

using ember::DType;
using ember::kernels::Conv2dGeometry;
using ember::kernels::Pool2dGeometry;
using ember::simt::cudnn_shim::Calls;
using ember::simt::cudnn_shim::Pass;

// ---- live objects ---------------------------------------------------------------------------------

// The objects handed out and not yet destroyed, of one kind: a destroyed or made-up pointer is
// BAD_PARAM instead of a use-after-free.
template <typename T>
struct Live {
  std::mutex mu;
  std::unordered_set<const T*> objects;

  cudnnStatus_t create(T** out) {
    if (out == nullptr) return CUDNN_STATUS_BAD_PARAM;
    *out = new T;
    std::lock_guard<std::mutex> lock(mu);
    objects.insert(*out);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t destroy(T* p) {
    if (p == nullptr) return CUDNN_STATUS_SUCCESS;  // cuDNN: destroying NULL is a no-op
    {
      std::lock_guard<std::mutex> lock(mu);
      if (objects.erase(p) == 0) return CUDNN_STATUS_BAD_PARAM;
    }
    delete p;
    return CUDNN_STATUS_SUCCESS;
  }
  bool live(const T* p) {
    std::lock_guard<std::mutex> lock(mu);
    return p != nullptr && objects.count(p) != 0;
  }
  // Live and set (for descriptors).
  bool ready(const T* p) { return live(p) && p->set; }
};

Live<cudnnContext> g_handles;
Live<cudnnTensorStruct> g_tensors;
Live<cudnnFilterStruct> g_filters;
Live<cudnnConvolutionStruct> g_convs;
Live<cudnnPoolingStruct> g_pools;
Live<cudnnActivationStruct> g_acts;

// ---- counters (cudnn_shim.h) ----------------------------------------------------------------------

std::mutex g_calls_mu;
Calls g_calls;

template <typename F>
void count(F f) {
  std::lock_guard<std::mutex> lock(g_calls_mu);
  f(g_calls);
}

// ---- checks ------------------------------------------------------------------------------------

bool valid_type(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

// The ember dtype the shim computes a cuDNN data type in; false for the types it does not compute.
bool computed_type(cudnnDataType_t t, DType* out) {
  if (t == CUDNN_DATA_FLOAT)
    *out = DType::f32;
  else if (t == CUDNN_DATA_DOUBLE)
    *out = DType::f64;
  else
    return false;
  return true;
}

// The 16-bit data types the shim computes (convolutions, bias gradients, cudnnAddTensor).
bool computed_16bit_type(cudnnDataType_t t, DType* out) {
  if (t == CUDNN_DATA_HALF)
    *out = DType::f16;
  else if (t == CUDNN_DATA_BFLOAT16)
    *out = DType::bf16;
  else
    return false;
  return true;
}

// cuDNN's supported configurations of a convolution the shim computes: FLOAT_CONFIG (float data,
// float compute), DOUBLE_CONFIG, PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG (16-bit data, float
// compute). TRUE_HALF_CONFIG (half compute) is cuDNN's but not the shim's.
bool computed_conv_config(cudnnDataType_t data, cudnnDataType_t compute, DType* out) {
  if (computed_type(data, out)) return compute == data;
  return computed_16bit_type(data, out) && compute == CUDNN_DATA_FLOAT;
}

size_t elem_size(DType dt) { return static_cast<size_t>(ember::dtype_size(dt)); }

// A 16-bit buffer of n elements widened to float (exact).
std::vector<float> widen(DType dt, const void* p, size_t n) {
  std::vector<float> r(n);
  if (dt == DType::f16)
    for (size_t i = 0; i < n; ++i) r[i] = static_cast<float>(static_cast<const ember::Half*>(p)[i]);
  else
    for (size_t i = 0; i < n; ++i) r[i] = static_cast<float>(static_cast<const ember::BFloat16*>(p)[i]);
  return r;
}

// out (n elements of 16-bit dt) = round(alpha * r + beta * out), in float, rounded once; out is not
// read when beta == 0 (cuDNN's rule).
void round_blend(DType dt, void* out, const float* r, size_t n, float alpha, float beta) {
  auto run = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    for (size_t i = 0; i < n; ++i) {
      const float v = alpha * r[i];
      o[i] = T(beta == 0.0f ? v : v + beta * static_cast<float>(o[i]));
    }
  };
  if (dt == DType::f16)
    run(static_cast<ember::Half*>(out));
  else
    run(static_cast<ember::BFloat16*>(out));
}

int64_t numel(const cudnnTensorStruct* t) { return int64_t{t->n} * t->c * t->h * t->w; }

bool same_dims(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->type == b->type;
}

using ember::simt::is_device_range;

// Checks that each named operand is aligned to `align` bytes (its element size; 16 for a
// workspace), BAD_PARAM_MISALIGNED_POINTER otherwise, and device memory of its extent,
// EXECUTION_FAILED otherwise.
struct Operand {
  const char* name;
  const void* p;
  size_t bytes;
};
cudnnStatus_t check_device(const char* fn, size_t align, std::initializer_list<Operand> ops) {
  for (const Operand& o : ops) {
    if (reinterpret_cast<uintptr_t>(o.p) % align != 0) {
      std::fprintf(stderr, "[cudnn shim] %s: %s (%p) is not aligned to %zu bytes\n", fn, o.name, o.p, align);
      return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
    }
    if (!is_device_range(o.p, o.bytes)) {
      std::fprintf(stderr, "[cudnn shim] %s: %s (%p, %zu bytes) is not device memory\n", fn, o.name, o.p, o.bytes);
      return CUDNN_STATUS_EXECUTION_FAILED;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t sync(cudnnHandle_t h) {
  return cudaStreamSynchronize(h->stream) == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

// The computation in stream order on the handle's stream: now, or a node of a capture (Find,
// which measures on the host, stays outside: it synchronizes, and a capture refuses that).
cudnnStatus_t in_stream_order(cudnnHandle_t h, std::function<void()> work) {
  return ember::simt::run_in_stream_order(h->stream, std::move(work)) == cudaSuccess ? CUDNN_STATUS_SUCCESS
                                                                                     : CUDNN_STATUS_EXECUTION_FAILED;
}

// out[i] = alpha * r[i] + beta * out[i] over n elements, out not read when beta == 0 (cuDNN's
// rule); alpha = 1, beta = 0 copies r bit for bit.
template <typename T>
void blend(T* out, const T* r, size_t n, T alpha, T beta) {
  if (beta == T(0)) {
    if (alpha == T(1)) {
      if (out != r) std::memcpy(out, r, n * sizeof(T));
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = alpha * r[i];
    }
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = alpha * r[i] + beta * out[i];
  }
}

// alpha and beta, read from the host when the call is made (they are float for float data and
// double for double, as cuDNN takes them; a float is exact as a double).
struct Scaling {
  double alpha, beta;
};
Scaling read_scaling(DType dt, const void* alpha, const void* beta) {
  if (dt == DType::f64) return {*static_cast<const double*>(alpha), *static_cast<const double*>(beta)};
  return {*static_cast<const float*>(alpha), *static_cast<const float*>(beta)};
}

// Runs `compute(dst)` so that `out` (n elements of dt) ends up alpha * result + beta * out: into
// out directly for the plain alpha = 1, beta = 0, through a scratch buffer otherwise.
template <typename Compute>
void with_scaling(DType dt, Scaling scaling, void* out, size_t n, Compute compute) {
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T a = static_cast<T>(scaling.alpha), b = static_cast<T>(scaling.beta);
    if (a == T(1) && b == T(0)) {
      compute(out);
      return;
    }
    std::vector<T> r(n);
    compute(r.data());
    blend(static_cast<T*>(out), r.data(), n, a, b);
  };
  if (dt == DType::f64)
    run(0.0);
  else
    run(0.0f);
}

// ---- convolution problems -----------------------------------------------------------------------

// The geometry of x (*) w, checked as cudnnConvolutionForward documents its descriptors, with the
// output size cuDNN computes (y is checked against it by the caller).
cudnnStatus_t conv_geometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* cd,
                            const cudnnTensorStruct* y, Conv2dGeometry* g, DType* dt) {
  if (!g_tensors.ready(x) || !g_filters.ready(w) || !g_convs.ready(cd) || !g_tensors.ready(y))
    return CUDNN_STATUS_BAD_PARAM;
  if (x->type != w->type || x->type != y->type) return CUDNN_STATUS_BAD_PARAM;
  if (int64_t{w->c} * cd->groups != x->c) return CUDNN_STATUS_BAD_PARAM;
  if (w->k % cd->groups != 0) return CUDNN_STATUS_BAD_PARAM;
  g->n = x->n, g->c_in = x->c, g->h = x->h, g->w = x->w;
  g->c_out = w->k, g->kh = w->h, g->kw = w->w;
  g->stride_h = cd->stride_h, g->stride_w = cd->stride_w, g->pad_h = cd->pad_h, g->pad_w = cd->pad_w;
  g->dil_h = cd->dil_h, g->dil_w = cd->dil_w, g->groups = cd->groups;
  g->out_h = ember::kernels::conv2d_out_size(g->h, g->kh, g->stride_h, g->pad_h, g->dil_h);
  g->out_w = ember::kernels::conv2d_out_size(g->w, g->kw, g->stride_w, g->pad_w, g->dil_w);
  // A (dilated) filter larger than the padded input.
  if (g->out_h <= 0 || g->out_w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (y->n != x->n || y->c != w->k) return CUDNN_STATUS_BAD_PARAM;
  if (y->h != g->out_h || y->w != g->out_w) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!computed_conv_config(x->type, cd->compute, dt)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (w->format != CUDNN_TENSOR_NCHW || cd->mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
  return CUDNN_STATUS_SUCCESS;
}

// One algorithm's answer for a problem: supported or not, and its workspace.
struct AlgoInfo {
  bool supported = false;
  size_t workspace = 0;
  bool deterministic = true;
};

bool stride1_undilated(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1;
}
// Bytes of padded transforms for FFT: real-to-complex planes of the padded input for x, w and y.
size_t fft_bytes(const Conv2dGeometry& g, size_t elem, int64_t tile) {
  const int64_t fh = tile > 0 ? tile : g.h + 2 * g.pad_h, fw = tile > 0 ? tile : g.w + 2 * g.pad_w;
  const int64_t planes = g.n * g.c_in + g.c_out * (g.c_in / g.groups) + g.n * g.c_out;
  return static_cast<size_t>(fh * (fw / 2 + 1) * planes) * 2 * elem;
}
bool fft_fits(const Conv2dGeometry& g) { return g.h + 2 * g.pad_h <= 256 && g.w + 2 * g.pad_w <= 256; }
// Winograd F(4x4, 3x3): 6x6 transformed tiles of the filter and of every 4x4 output tile.
size_t winograd_bytes(const Conv2dGeometry& g, size_t elem) {
  const int64_t tiles = ((g.out_h + 3) / 4) * ((g.out_w + 3) / 4);
  return static_cast<size_t>(36 * (g.c_out * (g.c_in / g.groups) + g.n * (g.c_in + g.c_out) * tiles)) * elem;
}
size_t im2col_bytes(const Conv2dGeometry& g, size_t elem) {
  return static_cast<size_t>(g.c_in * g.kh * g.kw * g.out_h * g.out_w) * elem;
}

// Note [The shim's convolution algorithms]: what each algorithm of each pass supports and needs.
AlgoInfo algo_info(Pass pass, int algo, const Conv2dGeometry& g, DType dt) {
  const size_t elem = elem_size(dt);
  const bool f32 = dt == DType::f32, s1 = stride1_undilated(g);
  const bool k3 = g.kh == 3 && g.kw == 3, k5 = g.kh == 5 && g.kw == 5;
  switch (pass) {
    case Pass::Forward:
      switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return {true, 0};
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
          return {true, static_cast<size_t>(g.c_in / g.groups * g.kh * g.kw + 1) * sizeof(int)};
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return {true, im2col_bytes(g, elem)};
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return {};
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return {f32 && s1 && fft_fits(g), fft_bytes(g, elem, 0)};
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return {f32 && s1, fft_bytes(g, elem, 32)};
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return {f32 && s1 && k3, 0};
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return {f32 && s1 && (k3 || k5), winograd_bytes(g, elem)};
      }
      return {};
    case Pass::BackwardData:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return {true, 0, false};
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return {true, im2col_bytes(g, elem)};
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return {f32 && s1 && fft_fits(g), fft_bytes(g, elem, 0)};
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return {f32 && s1, fft_bytes(g, elem, 32)};
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return {f32 && s1 && k3, 0};
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return {f32 && s1 && k3, winograd_bytes(g, elem)};
      }
      return {};
    case Pass::BackwardFilter:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return {true, 0, false};
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return {true, im2col_bytes(g, elem)};
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return {f32 && s1 && fft_fits(g), fft_bytes(g, elem, 0)};
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
          return {true, static_cast<size_t>(g.c_out * (g.c_in / g.groups) * g.kh * g.kw) * elem, false};
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return {};  // not implemented in cuDNN either
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return {f32 && s1 && k3, winograd_bytes(g, elem)};
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return {f32 && s1, fft_bytes(g, elem, 32)};
      }
      return {};
  }
  return {};
}

// The heuristics' fixed order per pass (Note [The shim's convolution algorithms]).
const std::vector<int>& heuristic_order(Pass pass) {
  static const std::vector<int> fwd = {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                                       CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                                       CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                                       CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                       CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                       CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
  static const std::vector<int> data = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
  static const std::vector<int> filter = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD};
  return pass == Pass::Forward ? fwd : pass == Pass::BackwardData ? data : filter;
}

// One ranked entry, before it is written into the pass's perf struct.
struct Perf {
  int algo;
  cudnnStatus_t status;
  float time;
  size_t memory;
  bool deterministic;
};

template <typename PerfT, typename AlgoT>
void write_perf(const std::vector<Perf>& ranked, int requested, int* returned, PerfT* out, cudnnMathType_t math) {
  const int n = std::min<int>(requested, static_cast<int>(ranked.size()));
  for (int i = 0; i < n; ++i) {
    out[i] = PerfT{};
    out[i].algo = static_cast<AlgoT>(ranked[static_cast<size_t>(i)].algo);
    out[i].status = ranked[static_cast<size_t>(i)].status;
    out[i].time = ranked[static_cast<size_t>(i)].time;
    out[i].memory = ranked[static_cast<size_t>(i)].memory;
    out[i].determinism = ranked[static_cast<size_t>(i)].deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    out[i].mathType = math;
  }
  *returned = n;
}

// Heuristic ranking: supported algorithms in the fixed order, then the unsupported ones.
std::vector<Perf> heuristics(Pass pass, const Conv2dGeometry& g, DType dt) {
  std::vector<Perf> ok, not_ok;
  for (int algo : heuristic_order(pass)) {
    const AlgoInfo info = algo_info(pass, algo, g, dt);
    (info.supported ? ok : not_ok)
        .push_back(Perf{algo, info.supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED, -1.0f,
                        info.supported ? info.workspace : 0, info.deterministic});
  }
  ok.insert(ok.end(), not_ok.begin(), not_ok.end());
  return ok;
}

// The computation of one pass into `out` (alpha = 1, beta = 0), with ember's CPU kernels; f32 or
// f64.
void compute_pass(Pass pass, DType dt, const Conv2dGeometry& g, const void* a, const void* b, void* out) {
  switch (pass) {
    case Pass::Forward: ember::kernels::cpu::conv2d_forward(dt, g, a, b, nullptr, out); break;
    case Pass::BackwardData: ember::kernels::cpu::conv2d_backward_data(dt, g, a, b, out); break;
    case Pass::BackwardFilter: ember::kernels::cpu::conv2d_backward_weight(dt, g, a, b, out); break;
  }
}

// Elements of the operands of one pass: a and b as compute_pass reads them, and the output.
struct PassSizes {
  size_t a, b, out;
};
PassSizes pass_sizes(Pass pass, const Conv2dGeometry& g) {
  const auto x = static_cast<size_t>(g.n * g.c_in * g.h * g.w);
  const auto w = static_cast<size_t>(g.c_out * (g.c_in / g.groups) * g.kh * g.kw);
  const auto y = static_cast<size_t>(g.n * g.c_out * g.out_h * g.out_w);
  switch (pass) {
    case Pass::Forward: return {x, w, y};
    case Pass::BackwardData: return {y, w, x};
    case Pass::BackwardFilter: return {y, x, w};
  }
  return {};
}

// One pass of 16-bit operands: widened to float, computed by the f32 CPU kernels (sums in float),
// out = round(alpha * result + beta * out) with one rounding.
void compute_pass_16bit(Pass pass, DType dt, const Conv2dGeometry& g, const void* a, const void* b, void* out,
                        float alpha, float beta) {
  const PassSizes n = pass_sizes(pass, g);
  const std::vector<float> a32 = widen(dt, a, n.a), b32 = widen(dt, b, n.b);
  std::vector<float> r(n.out);
  compute_pass(pass, DType::f32, g, a32.data(), b32.data(), r.data());
  round_blend(dt, out, r.data(), n.out, alpha, beta);
}

// Any computed configuration, alpha = 1, beta = 0.
void compute_pass_any(Pass pass, DType dt, const Conv2dGeometry& g, const void* a, const void* b, void* out) {
  if (ember::is_low_precision(dt))
    compute_pass_16bit(pass, dt, g, a, b, out, 1.0f, 0.0f);
  else
    compute_pass(pass, dt, g, a, b, out);
}

// The descriptors of one pass in cuDNN's argument order, mapped to (x, w, y) of the forward
// problem; the operands of compute_pass (a, b) and the output.
struct PassArgs {
  const cudnnTensorStruct* x;
  const cudnnFilterStruct* w;
  const cudnnConvolutionStruct* conv;
  const cudnnTensorStruct* y;
  const void* a;
  const void* b;
  void* out;
};

size_t out_bytes(Pass pass, const Conv2dGeometry& g, DType dt) {
  const int64_t n = pass == Pass::Forward        ? g.n * g.c_out * g.out_h * g.out_w
                    : pass == Pass::BackwardData ? g.n * g.c_in * g.h * g.w
                                                 : g.c_out * (g.c_in / g.groups) * g.kh * g.kw;
  return static_cast<size_t>(n) * elem_size(dt);
}

// Checks the operands of a pass as device memory: a and b as compute_pass reads them, the output.
cudnnStatus_t check_pass_memory(const char* fn, Pass pass, const Conv2dGeometry& g, DType dt, const PassArgs& p) {
  const size_t e = elem_size(dt);
  const size_t x = static_cast<size_t>(g.n * g.c_in * g.h * g.w) * e;
  const size_t w = static_cast<size_t>(g.c_out * (g.c_in / g.groups) * g.kh * g.kw) * e;
  const size_t y = static_cast<size_t>(g.n * g.c_out * g.out_h * g.out_w) * e;
  switch (pass) {
    case Pass::Forward: return check_device(fn, e, {{"x", p.a, x}, {"w", p.b, w}, {"y", p.out, y}});
    case Pass::BackwardData: return check_device(fn, e, {{"dy", p.a, y}, {"w", p.b, w}, {"dx", p.out, x}});
    case Pass::BackwardFilter: return check_device(fn, e, {{"dy", p.a, y}, {"x", p.b, x}, {"dw", p.out, w}});
  }
  return CUDNN_STATUS_SUCCESS;
}

template <typename PerfT, typename AlgoT>
cudnnStatus_t get_algorithm(Pass pass, cudnnHandle_t h, const PassArgs& p, int requested, int* returned, PerfT* perf) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  Conv2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = conv_geometry(p.x, p.w, p.conv, p.y, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (requested < 1 || returned == nullptr || perf == nullptr) return CUDNN_STATUS_BAD_PARAM;
  count([&](Calls& c) { ++c.get_algorithm[static_cast<int>(pass)]; });
  write_perf<PerfT, AlgoT>(heuristics(pass, g, dt), requested, returned, perf, p.conv->math);
  return CUDNN_STATUS_SUCCESS;
}

template <typename PerfT, typename AlgoT>
cudnnStatus_t find_algorithm(const char* fn, Pass pass, cudnnHandle_t h, const PassArgs& p, int requested,
                             int* returned, PerfT* perf, void* ws, size_t ws_bytes) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  Conv2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = conv_geometry(p.x, p.w, p.conv, p.y, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (requested < 1 || returned == nullptr || perf == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (p.a == nullptr || p.b == nullptr || p.out == nullptr || (ws == nullptr && ws_bytes > 0))
    return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t st = check_pass_memory(fn, pass, g, dt, p); st != CUDNN_STATUS_SUCCESS) return st;
  if (ws_bytes > 0) {
    if (const cudnnStatus_t st = check_device(fn, 16, {{"workSpace", ws, ws_bytes}}); st != CUDNN_STATUS_SUCCESS)
      return st;
  }
  if (const cudnnStatus_t st = sync(h); st != CUDNN_STATUS_SUCCESS) return st;
  count([&](Calls& c) { ++c.find_algorithm[static_cast<int>(pass)]; });
  std::vector<Perf> ran, skipped;
  for (const Perf& candidate : heuristics(pass, g, dt)) {
    Perf r = candidate;
    if (r.status == CUDNN_STATUS_SUCCESS && r.memory > ws_bytes) {
      r.status = CUDNN_STATUS_NOT_SUPPORTED;  // needs more workspace than Find was given
    }
    if (r.status != CUDNN_STATUS_SUCCESS) {
      skipped.push_back(r);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    compute_pass_any(pass, dt, g, p.a, p.b, p.out);
    r.time = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ran.push_back(r);
  }
  std::stable_sort(ran.begin(), ran.end(), [](const Perf& a, const Perf& b) { return a.time < b.time; });
  ran.insert(ran.end(), skipped.begin(), skipped.end());
  write_perf<PerfT, AlgoT>(ran, requested, returned, perf, p.conv->math);
  return CUDNN_STATUS_SUCCESS;
}

// The workspace algorithm `algo` needs for the problem; NOT_SUPPORTED when it cannot compute it.
cudnnStatus_t workspace_size(Pass pass, cudnnHandle_t h, const PassArgs& p, int algo, size_t* bytes) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  Conv2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = conv_geometry(p.x, p.w, p.conv, p.y, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const AlgoInfo info = algo_info(pass, algo, g, dt);
  if (!info.supported) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = info.workspace;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t convolve(const char* fn, Pass pass, cudnnHandle_t h, const void* alpha, const PassArgs& p, int algo,
                       void* ws, size_t ws_bytes, const void* beta) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  Conv2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = conv_geometry(p.x, p.w, p.conv, p.y, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (alpha == nullptr || beta == nullptr || p.a == nullptr || p.b == nullptr || p.out == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  const AlgoInfo info = algo_info(pass, algo, g, dt);
  if (!info.supported) return CUDNN_STATUS_NOT_SUPPORTED;
  if ((ws == nullptr && ws_bytes > 0) || ws_bytes < info.workspace) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t st = check_pass_memory(fn, pass, g, dt, p); st != CUDNN_STATUS_SUCCESS) return st;
  if (info.workspace > 0) {
    if (const cudnnStatus_t st = check_device(fn, 16, {{"workSpace", ws, ws_bytes}}); st != CUDNN_STATUS_SUCCESS)
      return st;
  }
  count([&](Calls& c) {
    const int i = static_cast<int>(pass);
    ++c.convolution[i];
    if (dt == DType::f16) ++c.convolution_f16[i];
    if (dt == DType::bf16) ++c.convolution_bf16[i];
    c.last_algorithm[i] = algo;
    c.last_workspace_bytes[i] = ws_bytes;
  });
  const Scaling sc = read_scaling(dt, alpha, beta);
  const void *a = p.a, *b = p.b;
  void* out = p.out;
  if (ember::is_low_precision(dt)) {
    return in_stream_order(h, [=] {
      compute_pass_16bit(pass, dt, g, a, b, out, static_cast<float>(sc.alpha), static_cast<float>(sc.beta));
    });
  }
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, out, out_bytes(pass, g, dt) / elem_size(dt),
                 [&](void* dst) { compute_pass(pass, dt, g, a, b, dst); });
  });
}

// ---- pooling ------------------------------------------------------------------------------------

// The pooling window over x, checked against y as cudnnPoolingForward documents it; the output
// size must be cuDNN's (floor) one.
cudnnStatus_t pool_geometry(const cudnnPoolingStruct* pd, const cudnnTensorStruct* x, const cudnnTensorStruct* y,
                            Pool2dGeometry* g, DType* dt) {
  if (!g_pools.ready(pd) || !g_tensors.ready(x) || !g_tensors.ready(y)) return CUDNN_STATUS_BAD_PARAM;
  if (x->type != y->type || x->n != y->n || x->c != y->c) return CUDNN_STATUS_BAD_PARAM;
  g->planes = int64_t{x->n} * x->c;
  g->in_h = x->h, g->in_w = x->w, g->out_h = y->h, g->out_w = y->w;
  g->kernel_h = pd->window_h, g->kernel_w = pd->window_w;
  g->stride_h = pd->stride_h, g->stride_w = pd->stride_w, g->pad_h = pd->pad_h, g->pad_w = pd->pad_w;
  const int64_t oh = ember::kernels::pool_output_size(x->h, pd->window_h, pd->pad_h, pd->stride_h, 1, false);
  const int64_t ow = ember::kernels::pool_output_size(x->w, pd->window_w, pd->pad_w, pd->stride_w, 1, false);
  if (oh <= 0 || ow <= 0 || y->h != oh || y->w != ow) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!computed_type(x->type, dt)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (pd->nan != CUDNN_PROPAGATE_NAN && (pd->mode == CUDNN_POOLING_MAX || pd->mode == CUDNN_POOLING_MAX_DETERMINISTIC))
    return CUDNN_STATUS_NOT_SUPPORTED;
  return CUDNN_STATUS_SUCCESS;
}

bool is_max(const cudnnPoolingStruct* pd) {
  return pd->mode == CUDNN_POOLING_MAX || pd->mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}

// ---- activations ----------------------------------------------------------------------------------

cudnnStatus_t activation_op(const cudnnActivationStruct* ad, ember::kernels::UnaryOp* op) {
  switch (ad->mode) {
    case CUDNN_ACTIVATION_RELU: *op = ember::kernels::UnaryOp::Relu; return CUDNN_STATUS_SUCCESS;
    case CUDNN_ACTIVATION_SIGMOID: *op = ember::kernels::UnaryOp::Sigmoid; return CUDNN_STATUS_SUCCESS;
    case CUDNN_ACTIVATION_TANH: *op = ember::kernels::UnaryOp::Tanh; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_NOT_SUPPORTED;
  }
}

ember::kernels::IterShape flat(int64_t n) {
  ember::kernels::IterShape s;
  s.ndim = 1;
  s.sizes[0] = n;
  return s;
}
ember::kernels::Operand contiguous(const void* p) {
  ember::kernels::Operand o;
  o.data = const_cast<void*>(p);
  o.strides[0] = 1;
  return o;
}

}  // namespace

namespace ember::simt::cudnn_shim {
Calls calls() {
  std::lock_guard<std::mutex> lock(g_calls_mu);
  return g_calls;
}
}  // namespace ember::simt::cudnn_shim

extern "C" {

// ---- handles and errors ---------------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t* handle) { return g_handles.create(handle); }

cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return g_handles.destroy(handle);
}

cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!g_handles.live(handle)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (!g_handles.live(handle) || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

// ---- tensor and filter descriptors ---------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return g_tensors.create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return g_tensors.destroy(d); }

cudnnStatus_t CUDNNWINAPI cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                                     cudnnDataType_t type, int n, int c, int h, int w) {
  if (!g_tensors.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || !valid_type(type)) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC && format != CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  // cuDNN's limit: at most 2^31 - 1 elements in one tensor.
  if (int64_t{n} * c * h * w > int64_t{INT32_MAX}) return CUDNN_STATUS_NOT_SUPPORTED;
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;  // the shim computes NCHW only
  *d = cudnnTensorStruct{true, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return g_filters.create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return g_filters.destroy(d); }

cudnnStatus_t CUDNNWINAPI cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                                     cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (!g_filters.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0 || !valid_type(type)) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC && format != CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnFilterStruct{true, type, format, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

// ---- convolution descriptors ----------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  return g_convs.create(d);
}
cudnnStatus_t CUDNNWINAPI cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  return g_convs.destroy(d);
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u,
                                                          int v, int dilation_h, int dilation_w,
                                                          cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
  if (!g_convs.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if ((mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) || !valid_type(compute))
    return CUDNN_STATUS_BAD_PARAM;
  d->set = true;
  d->pad_h = pad_h, d->pad_w = pad_w, d->stride_h = u, d->stride_w = v;
  d->dil_h = dilation_h, d->dil_w = dilation_w, d->mode = mode, d->compute = compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (!g_convs.live(d) || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (!g_convs.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
      math != CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  d->math = math;  // TF32 tensor-op math may round inputs; the shim computes in full float32
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm choice -----------------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                                 const cudnnFilterDescriptor_t w,
                                                                 const cudnnConvolutionDescriptor_t conv,
                                                                 const cudnnTensorDescriptor_t y, const int requested,
                                                                 int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  return get_algorithm<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Pass::Forward, h, PassArgs{x, w, conv, y, nullptr, nullptr, nullptr}, requested, returned, perf);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                                      const cudnnTensorDescriptor_t dy,
                                                                      const cudnnConvolutionDescriptor_t conv,
                                                                      const cudnnTensorDescriptor_t dx,
                                                                      const int requested, int* returned,
                                                                      cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return get_algorithm<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Pass::BackwardData, h, PassArgs{dx, w, conv, dy, nullptr, nullptr, nullptr}, requested, returned, perf);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return get_algorithm<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Pass::BackwardFilter, h, PassArgs{x, dw, conv, dy, nullptr, nullptr, nullptr}, requested, returned, perf);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void* x, const cudnnFilterDescriptor_t wd, const void* w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t yd, void* y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* perf, void* ws, size_t ws_bytes) {
  return find_algorithm<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      "cudnnFindConvolutionForwardAlgorithmEx", Pass::Forward, h, PassArgs{xd, wd, conv, yd, x, w, y}, requested,
      returned, perf, ws, ws_bytes);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dxd, void* dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws, size_t ws_bytes) {
  return find_algorithm<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      "cudnnFindConvolutionBackwardDataAlgorithmEx", Pass::BackwardData, h, PassArgs{dxd, wd, conv, dyd, dy, w, dx},
      requested, returned, perf, ws, ws_bytes);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dwd, void* dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws, size_t ws_bytes) {
  return find_algorithm<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      "cudnnFindConvolutionBackwardFilterAlgorithmEx", Pass::BackwardFilter, h, PassArgs{xd, dwd, conv, dyd, dy, x, dw},
      requested, returned, perf, ws, ws_bytes);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                                  const cudnnFilterDescriptor_t w,
                                                                  const cudnnConvolutionDescriptor_t conv,
                                                                  const cudnnTensorDescriptor_t y,
                                                                  cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  return workspace_size(Pass::Forward, h, PassArgs{x, w, conv, y, nullptr, nullptr, nullptr}, algo, bytes);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                                       const cudnnTensorDescriptor_t dy,
                                                                       const cudnnConvolutionDescriptor_t conv,
                                                                       const cudnnTensorDescriptor_t dx,
                                                                       cudnnConvolutionBwdDataAlgo_t algo,
                                                                       size_t* bytes) {
  return workspace_size(Pass::BackwardData, h, PassArgs{dx, w, conv, dy, nullptr, nullptr, nullptr}, algo, bytes);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, cudnnConvolutionBwdFilterAlgo_t algo,
    size_t* bytes) {
  return workspace_size(Pass::BackwardFilter, h, PassArgs{x, dw, conv, dy, nullptr, nullptr, nullptr}, algo, bytes);
}

// ---- convolution ---------------------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                                  const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                                  const cudnnConvolutionDescriptor_t conv,
                                                  cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes,
                                                  const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  return convolve("cudnnConvolutionForward", Pass::Forward, h, alpha, PassArgs{xd, wd, conv, yd, x, w, y}, algo, ws,
                  ws_bytes, beta);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                                       const cudnnFilterDescriptor_t wd, const void* w,
                                                       const cudnnTensorDescriptor_t dyd, const void* dy,
                                                       const cudnnConvolutionDescriptor_t conv,
                                                       cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t ws_bytes,
                                                       const void* beta, const cudnnTensorDescriptor_t dxd, void* dx) {
  return convolve("cudnnConvolutionBackwardData", Pass::BackwardData, h, alpha, PassArgs{dxd, wd, conv, dyd, dy, w, dx},
                  algo, ws, ws_bytes, beta);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                                         const cudnnTensorDescriptor_t xd, const void* x,
                                                         const cudnnTensorDescriptor_t dyd, const void* dy,
                                                         const cudnnConvolutionDescriptor_t conv,
                                                         cudnnConvolutionBwdFilterAlgo_t algo, void* ws,
                                                         size_t ws_bytes, const void* beta,
                                                         const cudnnFilterDescriptor_t dwd, void* dw) {
  return convolve("cudnnConvolutionBackwardFilter", Pass::BackwardFilter, h, alpha,
                  PassArgs{xd, dwd, conv, dyd, dy, x, dw}, algo, ws, ws_bytes, beta);
}

// db (1, k, 1, 1) = alpha * (sum of dy over n, h, w) + beta * db.
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha,
                                                       const cudnnTensorDescriptor_t dyd, const void* dy,
                                                       const void* beta, const cudnnTensorDescriptor_t dbd, void* db) {
  if (!g_handles.live(h) || !g_tensors.ready(dyd) || !g_tensors.ready(dbd)) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || dy == nullptr || db == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (dyd->type != dbd->type || dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1)
    return CUDNN_STATUS_BAD_PARAM;
  DType dt;
  if (!computed_type(dyd->type, &dt) && !computed_16bit_type(dyd->type, &dt)) return CUDNN_STATUS_NOT_SUPPORTED;
  const size_t e = elem_size(dt);
  if (const cudnnStatus_t st =
          check_device("cudnnConvolutionBackwardBias", e,
                       {{"dy", dy, static_cast<size_t>(numel(dyd)) * e}, {"db", db, static_cast<size_t>(dbd->c) * e}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([&](Calls& c) {
    ++c.backward_bias;
    if (ember::is_low_precision(dt)) ++c.backward_bias_16bit;
  });
  Conv2dGeometry g;
  g.n = dyd->n, g.c_out = dyd->c, g.out_h = dyd->h, g.out_w = dyd->w;
  const Scaling sc = read_scaling(dt, alpha, beta);
  const size_t channels = static_cast<size_t>(dbd->c);
  if (ember::is_low_precision(dt)) {  // summed in float, rounded once
    const size_t n = static_cast<size_t>(numel(dyd));
    return in_stream_order(h, [=] {
      const std::vector<float> dy32 = widen(dt, dy, n);
      std::vector<float> r(channels);
      ember::kernels::cpu::conv2d_backward_bias(DType::f32, g, dy32.data(), r.data());
      round_blend(dt, db, r.data(), channels, static_cast<float>(sc.alpha), static_cast<float>(sc.beta));
    });
  }
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, db, channels, [&](void* dst) { ember::kernels::cpu::conv2d_backward_bias(dt, g, dy, dst); });
  });
}

// C = alpha * A + beta * C, A broadcast over every dim where it has size 1.
cudnnStatus_t CUDNNWINAPI cudnnAddTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t ad,
                                         const void* a, const void* beta, const cudnnTensorDescriptor_t cd, void* c) {
  if (!g_handles.live(h) || !g_tensors.ready(ad) || !g_tensors.ready(cd)) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || a == nullptr || c == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const int adims[4] = {ad->n, ad->c, ad->h, ad->w}, cdims[4] = {cd->n, cd->c, cd->h, cd->w};
  for (int i = 0; i < 4; ++i)
    if (adims[i] != cdims[i] && adims[i] != 1) return CUDNN_STATUS_BAD_PARAM;
  if (ad->type != cd->type) return CUDNN_STATUS_BAD_PARAM;
  DType dt;
  if (!computed_type(cd->type, &dt) && !computed_16bit_type(cd->type, &dt)) return CUDNN_STATUS_NOT_SUPPORTED;
  const size_t e = elem_size(dt);
  if (const cudnnStatus_t st =
          check_device("cudnnAddTensor", e,
                       {{"A", a, static_cast<size_t>(numel(ad)) * e}, {"C", c, static_cast<size_t>(numel(cd)) * e}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([&](Calls& calls) {
    ++calls.add_tensor;
    if (ember::is_low_precision(dt)) ++calls.add_tensor_16bit;
  });
  const Scaling sc = read_scaling(dt, alpha, beta);
  const cudnnTensorStruct A = *ad, C = *cd;  // the descriptors as they are at the call
  // T: the data type; S: the one computed in (float for 16-bit data: one rounding per element).
  auto run = [=](auto zero, auto scale_zero) {
    using T = decltype(zero);
    using S = decltype(scale_zero);
    const S al = static_cast<S>(sc.alpha), be = static_cast<S>(sc.beta);
    const T* src = static_cast<const T*>(a);
    T* dst = static_cast<T*>(c);
    size_t i = 0;
    for (int n = 0; n < C.n; ++n)
      for (int ch = 0; ch < C.c; ++ch)
        for (int y = 0; y < C.h; ++y)
          for (int x = 0; x < C.w; ++x, ++i) {
            const size_t j = ((static_cast<size_t>(A.n == 1 ? 0 : n) * A.c + (A.c == 1 ? 0 : ch)) * A.h +
                              (A.h == 1 ? 0 : y)) *
                                 A.w +
                             (A.w == 1 ? 0 : x);
            const S v = al * static_cast<S>(src[j]);
            dst[i] = T(be == S(0) ? v : v + be * static_cast<S>(dst[i]));
          }
  };
  return in_stream_order(h, [=] {
    if (dt == DType::f64)
      run(0.0, 0.0);
    else if (dt == DType::f16)
      run(ember::Half(0.0f), 0.0f);
    else if (dt == DType::bf16)
      run(ember::BFloat16(0.0f), 0.0f);
    else
      run(0.0f, 0.0f);
  });
}

// ---- pooling --------------------------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* d) { return g_pools.create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d) { return g_pools.destroy(d); }

cudnnStatus_t CUDNNWINAPI cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode,
                                                      cudnnNanPropagation_t nan, int window_h, int window_w, int pad_h,
                                                      int pad_w, int stride_h, int stride_w) {
  if (!g_pools.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_POOLING_MAX && mode != CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING &&
      mode != CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING && mode != CUDNN_POOLING_MAX_DETERMINISTIC)
    return CUDNN_STATUS_BAD_PARAM;
  if (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN) return CUDNN_STATUS_BAD_PARAM;
  if (window_h <= 0 || window_w <= 0 || stride_h <= 0 || stride_w <= 0 || pad_h < 0 || pad_w < 0)
    return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnPoolingStruct{true, mode, nan, window_h, window_w, pad_h, pad_w, stride_h, stride_w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                              const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                              const cudnnTensorDescriptor_t yd, void* y) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  Pool2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = pool_geometry(pd, xd, yd, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (alpha == nullptr || beta == nullptr || x == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const size_t e = elem_size(dt);
  if (const cudnnStatus_t st =
          check_device("cudnnPoolingForward", e,
                       {{"x", x, static_cast<size_t>(numel(xd)) * e}, {"y", y, static_cast<size_t>(numel(yd)) * e}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.pooling_forward; });
  const size_t out_n = static_cast<size_t>(numel(yd));
  const Scaling sc = read_scaling(dt, alpha, beta);
  const bool max = is_max(pd), include_padding = pd->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, y, out_n, [&](void* dst) {
      if (max) {
        std::vector<int64_t> indices(out_n);
        ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, x, dst, indices.data());
      } else {
        ember::kernels::cpu::avg_pool2d_forward(dt, g, include_padding, x, dst);
      }
    });
  });
}

// dx = alpha * (the gradient of pooling x into y, given dy) + beta * dx. Max pooling sends each
// output's gradient to the first maximum of its window (NaN wins), recomputed from x.
cudnnStatus_t CUDNNWINAPI cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                               const cudnnTensorDescriptor_t yd, const void* y,
                                               const cudnnTensorDescriptor_t dyd, const void* dy,
                                               const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                               const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!g_handles.live(h)) return CUDNN_STATUS_BAD_PARAM;
  if (!g_tensors.ready(dyd) || !g_tensors.ready(dxd)) return CUDNN_STATUS_BAD_PARAM;
  Pool2dGeometry g;
  DType dt;
  if (const cudnnStatus_t st = pool_geometry(pd, xd, yd, &g, &dt); st != CUDNN_STATUS_SUCCESS) return st;
  if (!same_dims(yd, dyd) || !same_dims(xd, dxd)) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || y == nullptr || dy == nullptr || x == nullptr || dx == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  const size_t e = elem_size(dt), in_n = static_cast<size_t>(numel(xd)), out_n = static_cast<size_t>(numel(yd));
  if (const cudnnStatus_t st =
          check_device("cudnnPoolingBackward", e,
                       {{"y", y, out_n * e}, {"dy", dy, out_n * e}, {"x", x, in_n * e}, {"dx", dx, in_n * e}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.pooling_backward; });
  const Scaling sc = read_scaling(dt, alpha, beta);
  const bool max = is_max(pd), include_padding = pd->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, dx, in_n, [&](void* dst) {
      if (max) {
        std::vector<int64_t> indices(out_n);
        std::vector<double> out(out_n);  // room for out_n elements of either type
        ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, x, out.data(), indices.data());
        ember::kernels::cpu::max_pool2d_backward(dt, DType::i64, g, dy, indices.data(), dst);
      } else {
        ember::kernels::cpu::avg_pool2d_backward(dt, g, include_padding, dy, dst);
      }
    });
  });
}

// ---- activations ----------------------------------------------------------------------------------

cudnnStatus_t CUDNNWINAPI cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) { return g_acts.create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) { return g_acts.destroy(d); }

cudnnStatus_t CUDNNWINAPI cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                                       cudnnNanPropagation_t nan, double coef) {
  if (!g_acts.live(d)) return CUDNN_STATUS_BAD_PARAM;
  if (mode < CUDNN_ACTIVATION_SIGMOID || mode > CUDNN_ACTIVATION_SWISH) return CUDNN_STATUS_BAD_PARAM;
  if (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN) return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnActivationStruct{true, mode, nan, coef};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                                 const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                                 const cudnnTensorDescriptor_t yd, void* y) {
  if (!g_handles.live(h) || !g_acts.ready(ad) || !g_tensors.ready(xd) || !g_tensors.ready(yd))
    return CUDNN_STATUS_BAD_PARAM;
  if (!same_dims(xd, yd)) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || x == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  ember::kernels::UnaryOp op;
  DType dt;
  if (activation_op(ad, &op) != CUDNN_STATUS_SUCCESS || !computed_type(xd->type, &dt))
    return CUDNN_STATUS_NOT_SUPPORTED;
  const int64_t n = numel(xd);
  const size_t bytes = static_cast<size_t>(n) * elem_size(dt);
  if (const cudnnStatus_t st =
          check_device("cudnnActivationForward", elem_size(dt), {{"x", x, bytes}, {"y", y, bytes}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.activation_forward; });
  const Scaling sc = read_scaling(dt, alpha, beta);
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, y, static_cast<size_t>(n),
                 [&](void* dst) { ember::kernels::cpu::unary(op, dt, flat(n), contiguous(dst), contiguous(x), 0.0); });
  });
}

// dx = alpha * act'(x) dy + beta * dx, the derivative taken from y as ember's kernels take it
// (ReLU: y > 0; sigmoid: y (1 - y); tanh: 1 - y^2).
cudnnStatus_t CUDNNWINAPI cudnnActivationBackward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                                  const cudnnTensorDescriptor_t yd, const void* y,
                                                  const cudnnTensorDescriptor_t dyd, const void* dy,
                                                  const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                                  const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!g_handles.live(h) || !g_acts.ready(ad) || !g_tensors.ready(yd) || !g_tensors.ready(dyd) ||
      !g_tensors.ready(xd) || !g_tensors.ready(dxd))
    return CUDNN_STATUS_BAD_PARAM;
  if (!same_dims(xd, yd) || !same_dims(xd, dyd) || !same_dims(xd, dxd)) return CUDNN_STATUS_BAD_PARAM;
  if (alpha == nullptr || beta == nullptr || y == nullptr || dy == nullptr || x == nullptr || dx == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  ember::kernels::UnaryOp op;
  DType dt;
  if (activation_op(ad, &op) != CUDNN_STATUS_SUCCESS || !computed_type(xd->type, &dt))
    return CUDNN_STATUS_NOT_SUPPORTED;
  const int64_t n = numel(xd);
  const size_t bytes = static_cast<size_t>(n) * elem_size(dt);
  if (const cudnnStatus_t st = check_device("cudnnActivationBackward", elem_size(dt),
                                            {{"y", y, bytes}, {"dy", dy, bytes}, {"x", x, bytes}, {"dx", dx, bytes}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.activation_backward; });
  const Scaling sc = read_scaling(dt, alpha, beta);
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, dx, static_cast<size_t>(n), [&](void* dst) {
      ember::kernels::cpu::unary_backward(op, dt, flat(n), contiguous(dst), contiguous(dy), contiguous(x),
                                          contiguous(y), 0.0);
    });
  });
}

}  // extern "C"
