// The convolution half of the emulator's cuDNN shim (the file comment of cudnn_shim.cpp says what
// the shim checks and computes): filter and convolution descriptors, the algorithm choice
// (cudnnGet*Algorithm_v7, cudnnFind*AlgorithmEx, the workspace sizes), the three convolution
// passes and cudnnConvolutionBackwardBias.
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

#include "cudnn_shim_internal.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "../../core/dtype.h"
#include "../conv.h"
#include "../cpu/conv.h"

namespace {

using namespace ember::simt::cudnn_shim::detail;
using ember::simt::cudnn_shim::Calls;
using ember::kernels::Conv2dGeometry;
using ember::simt::cudnn_shim::Pass;

// cuDNN's supported configurations of a convolution the shim computes: FLOAT_CONFIG (float data,
// float compute), DOUBLE_CONFIG, PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG (16-bit data, float
// compute). TRUE_HALF_CONFIG (half compute) is cuDNN's but not the shim's.
bool computed_conv_config(cudnnDataType_t data, cudnnDataType_t compute, DType* out) {
  if (computed_type(data, out)) return compute == data;
  return computed_16bit_type(data, out) && compute == CUDNN_DATA_FLOAT;
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
  if (w->format == CUDNN_TENSOR_NCHW_VECT_C || cd->mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
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

// The operands a, b and out of a pass with their formats (Note [The shim's memory formats]).
struct PassDims {
  Dims4 a, b, out;
};
PassDims pass_dims(Pass pass, const PassArgs& p) {
  const Dims4 x = dims_of(p.x), w = dims_of(p.w), y = dims_of(p.y);
  switch (pass) {
    case Pass::Forward: return {x, w, y};
    case Pass::BackwardData: return {y, w, x};
    case Pass::BackwardFilter: return {y, x, w};
  }
  return {};
}

// Runs compute(a, b, out) on NCHW memory: NHWC operands staged through NCHW copies, the output's
// current values staged in when `keep_out` (a blend with beta != 0) and written back after.
template <typename Compute>
void in_nchw(const PassDims& d, size_t e, const void* a, const void* b, void* out, bool keep_out, Compute compute) {
  Nchw sa(d.a, e, a), sb(d.b, e, b), so(d.out, e, out, keep_out);
  compute(sa.get(), sb.get(), so.get());
  so.commit();
}

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
    in_nchw(pass_dims(pass, p), elem_size(dt), p.a, p.b, p.out, false,
            [&](const void* a, const void* b, void* out) { compute_pass_any(pass, dt, g, a, b, out); });
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
    if (p.x->format == CUDNN_TENSOR_NHWC && p.y->format == CUDNN_TENSOR_NHWC && p.w->format == CUDNN_TENSOR_NHWC)
      ++c.convolution_nhwc[i];
    c.last_algorithm[i] = algo;
    c.last_workspace_bytes[i] = ws_bytes;
  });
  const Scaling sc = read_scaling(dt, alpha, beta);
  const void *a0 = p.a, *b0 = p.b;
  void* out0 = p.out;
  const PassDims dims = pass_dims(pass, p);
  const size_t e = elem_size(dt);
  if (ember::is_low_precision(dt)) {
    return in_stream_order(h, [=] {
      in_nchw(dims, e, a0, b0, out0, sc.beta != 0.0, [&](const void* a, const void* b, void* out) {
        compute_pass_16bit(pass, dt, g, a, b, out, static_cast<float>(sc.alpha), static_cast<float>(sc.beta));
      });
    });
  }
  return in_stream_order(h, [=] {
    in_nchw(dims, e, a0, b0, out0, sc.beta != 0.0, [&](const void* a, const void* b, void* out) {
      with_scaling(dt, sc, out, out_bytes(pass, g, dt) / e, [&](void* dst) { compute_pass(pass, dt, g, a, b, dst); });
    });
  });
}

}  // namespace

extern "C" {

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
  // cuDNN 9 has no bf16 bias gradient: an H200 with cuDNN 9 answered this, and so does the shim.
  if (dt == ember::DType::bf16) return CUDNN_STATUS_NOT_SUPPORTED;
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
  const Dims4 dydims = dims_of(dyd);  // NHWC staged (Note [The shim's memory formats]); db is C values
  if (ember::is_low_precision(dt)) {  // summed in float, rounded once
    const size_t n = static_cast<size_t>(numel(dyd));
    return in_stream_order(h, [=] {
      Nchw sdy(dydims, e, dy);
      const std::vector<float> dy32 = widen(dt, sdy.get(), n);
      std::vector<float> r(channels);
      ember::kernels::cpu::conv2d_backward_bias(DType::f32, g, dy32.data(), r.data());
      round_blend(dt, db, r.data(), channels, static_cast<float>(sc.alpha), static_cast<float>(sc.beta));
    });
  }
  return in_stream_order(h, [=] {
    Nchw sdy(dydims, e, dy);
    with_scaling(dt, sc, db, channels,
                 [&](void* dst) { ember::kernels::cpu::conv2d_backward_bias(dt, g, sdy.get(), dst); });
  });
}

}  // extern "C"
