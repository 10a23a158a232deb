// The cuDNN 9 functions ember calls (kernels/cuda/cudnn.cu), and the workspace-size queries that go
// with them, for the SIMT flavour (compiled only there, and only when the real <cudnn.h> is found:
// with a real GPU, libcudnn is linked instead). This file has handles, tensor descriptors,
// cudnnAddTensor, pooling and activations; cudnn_shim_conv.cpp the convolutions
// (Note [The shim's convolution algorithms]); cudnn_shim_internal.h what both share.
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
// The shim computes float32 and float64, and also CUDNN_DATA_HALF and
// CUDNN_DATA_BFLOAT16 with float compute for convolutions, bias gradients, cudnnAddTensor, pooling
// and activations: the 16-bit values are widened to float (exactly), the float32 CPU kernel runs on
// them (alpha and beta applied in float) and each output element is rounded to 16 bits once, as a
// GPU computing PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG does. (The float32 average-pooling
// kernel sums a window in double and rounds the mean to float before that one 16-bit rounding.)
// Tensors and filters may be NCHW or NHWC (channels-last), staged through NCHW copies (Note [The
// shim's memory formats] in cudnn_shim_internal.h).
// cuDNN's table has no 16-bit data with a double compute type, nor bfloat16 compute:
// NOT_SUPPORTED, as from cuDNN. TRUE_HALF_CONFIG (half compute), other data types, NCHW_VECT_C,
// the CUDNN_CONVOLUTION (flipped) mode, activations other than ReLU/sigmoid/tanh and max pooling
// without NaN propagation are CUDNN_STATUS_NOT_SUPPORTED here although cuDNN has them (ember does
// not use them).
//
// A call then waits for the handle's stream (the shim runs on the host, outside the stream order)
// and computes with ember's CPU kernels (kernels/cpu/conv.h, pool.h, elementwise.h), honouring
// alpha and beta as cuDNN does: out = alpha * op(...) + beta * out, where beta == 0 means out is
// not read (it may hold NaN). With alpha = 1 and beta = 0 the result is the CPU kernel's, bit for
// bit.

#include "cudnn_shim_internal.h"

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#include "../../core/dtype.h"
#include "../cpu/elementwise.h"
#include "../cpu/pool.h"
#include "../elementwise.h"
#include "../pool.h"

namespace ember::simt::cudnn_shim::detail {

Live<cudnnContext> g_handles;
Live<cudnnTensorStruct> g_tensors;
Live<cudnnFilterStruct> g_filters;
Live<cudnnConvolutionStruct> g_convs;
Live<cudnnPoolingStruct> g_pools;
Live<cudnnActivationStruct> g_acts;

std::mutex g_calls_mu;
Calls g_calls;

}  // namespace ember::simt::cudnn_shim::detail

namespace {

using namespace ember::simt::cudnn_shim::detail;
using ember::simt::cudnn_shim::Calls;
using ember::kernels::Pool2dGeometry;

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
  if (!computed_type(x->type, dt) && !computed_16bit_type(x->type, dt)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (pd->nan != CUDNN_PROPAGATE_NAN && (pd->mode == CUDNN_POOLING_MAX || pd->mode == CUDNN_POOLING_MAX_DETERMINISTIC))
    return CUDNN_STATUS_NOT_SUPPORTED;
  return CUDNN_STATUS_SUCCESS;
}

bool is_max(const cudnnPoolingStruct* pd) {
  return pd->mode == CUDNN_POOLING_MAX || pd->mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}

// Counts one pooling or activation call of dtype dt in the 16-bit counters (i: 0 forward, 1
// backward); f32 and f64 calls are counted by the caller only.
void count_16bit(int64_t (Calls::*f16)[2], int64_t (Calls::*bf16)[2], DType dt, int i) {
  if (dt == DType::f16) count([&](Calls& c) { ++(c.*f16)[i]; });
  if (dt == DType::bf16) count([&](Calls& c) { ++(c.*bf16)[i]; });
}

// A pooling or activation call on 16-bit data: `compute(r)` runs the float32 CPU kernel on the
// widened (exact) inputs into r (out_n floats), and out = round(alpha * r + beta * out) with one
// rounding per element, as cuDNN computes 16-bit data in float.
template <typename Compute>
void compute_16bit(DType dt, Scaling sc, void* out, size_t out_n, Compute compute) {
  std::vector<float> r(out_n);
  compute(r.data());
  round_blend(dt, out, r.data(), out_n, static_cast<float>(sc.alpha), static_cast<float>(sc.beta));
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
  std::lock_guard<std::mutex> lock(detail::g_calls_mu);
  return detail::g_calls;
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
  if (format == CUDNN_TENSOR_NCHW_VECT_C) return CUDNN_STATUS_NOT_SUPPORTED;  // NCHW and NHWC only
  *d = cudnnTensorStruct{true, type, n, c, h, w, format};
  return CUDNN_STATUS_SUCCESS;
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
  auto run = [=](auto zero, auto scale_zero, const void* a_nchw, void* c_nchw) {
    using T = decltype(zero);
    using S = decltype(scale_zero);
    const S al = static_cast<S>(sc.alpha), be = static_cast<S>(sc.beta);
    const T* src = static_cast<const T*>(a_nchw);
    T* dst = static_cast<T*>(c_nchw);
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
    Nchw sa(dims_of(&A), e, a), so(dims_of(&C), e, c, sc.beta != 0.0);  // Note [The shim's memory formats]
    if (dt == DType::f64)
      run(0.0, 0.0, sa.get(), so.get());
    else if (dt == DType::f16)
      run(ember::Half(0.0f), 0.0f, sa.get(), so.get());
    else if (dt == DType::bf16)
      run(ember::BFloat16(0.0f), 0.0f, sa.get(), so.get());
    else
      run(0.0f, 0.0f, sa.get(), so.get());
    so.commit();
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
  count([&](Calls& c) {
    ++c.pooling_forward;
    if (xd->format == CUDNN_TENSOR_NHWC && yd->format == CUDNN_TENSOR_NHWC) ++c.pooling_nhwc[0];
  });
  count_16bit(&Calls::pooling_f16, &Calls::pooling_bf16, dt, 0);
  const size_t in_n = static_cast<size_t>(numel(xd)), out_n = static_cast<size_t>(numel(yd));
  const Scaling sc = read_scaling(dt, alpha, beta);
  const bool max = is_max(pd), include_padding = pd->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  const Dims4 xdims = dims_of(xd), ydims = dims_of(yd);  // Note [The shim's memory formats]
  if (ember::is_low_precision(dt)) {
    return in_stream_order(h, [=] {
      Nchw sx(xdims, e, x), sy(ydims, e, y, sc.beta != 0.0);
      compute_16bit(dt, sc, sy.get(), out_n, [&](float* r) {
        const std::vector<float> x32 = widen(dt, sx.get(), in_n);
        if (max) {
          std::vector<int64_t> indices(out_n);
          ember::kernels::cpu::max_pool2d_forward(DType::f32, DType::i64, g, x32.data(), r, indices.data());
        } else {
          ember::kernels::cpu::avg_pool2d_forward(DType::f32, g, include_padding, x32.data(), r);
        }
      });
      sy.commit();
    });
  }
  return in_stream_order(h, [=] {
    Nchw sx(xdims, e, x), sy(ydims, e, y, sc.beta != 0.0);
    with_scaling(dt, sc, sy.get(), out_n, [&](void* dst) {
      if (max) {
        std::vector<int64_t> indices(out_n);
        ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, sx.get(), dst, indices.data());
      } else {
        ember::kernels::cpu::avg_pool2d_forward(dt, g, include_padding, sx.get(), dst);
      }
    });
    sy.commit();
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
  count([&](Calls& c) {
    ++c.pooling_backward;
    if (xd->format == CUDNN_TENSOR_NHWC && yd->format == CUDNN_TENSOR_NHWC && dyd->format == CUDNN_TENSOR_NHWC &&
        dxd->format == CUDNN_TENSOR_NHWC)
      ++c.pooling_nhwc[1];
  });
  count_16bit(&Calls::pooling_f16, &Calls::pooling_bf16, dt, 1);
  const Scaling sc = read_scaling(dt, alpha, beta);
  const bool max = is_max(pd), include_padding = pd->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  // Note [The shim's memory formats]: each operand in its own descriptor's format.
  const Dims4 xdims = dims_of(xd), dydims = dims_of(dyd), dxdims = dims_of(dxd);
  if (ember::is_low_precision(dt)) {  // overlapping windows' gradients summed in float
    return in_stream_order(h, [=] {
      Nchw sx(xdims, e, x), sdy(dydims, e, dy), sdx(dxdims, e, dx, sc.beta != 0.0);
      compute_16bit(dt, sc, sdx.get(), in_n, [&](float* r) {
        const std::vector<float> dy32 = widen(dt, sdy.get(), out_n);
        if (max) {
          const std::vector<float> x32 = widen(dt, sx.get(), in_n);
          std::vector<int64_t> indices(out_n);
          std::vector<float> out(out_n);
          ember::kernels::cpu::max_pool2d_forward(DType::f32, DType::i64, g, x32.data(), out.data(), indices.data());
          ember::kernels::cpu::max_pool2d_backward(DType::f32, DType::i64, g, dy32.data(), indices.data(), r);
        } else {
          ember::kernels::cpu::avg_pool2d_backward(DType::f32, g, include_padding, dy32.data(), r);
        }
      });
      sdx.commit();
    });
  }
  return in_stream_order(h, [=] {
    Nchw sx(xdims, e, x), sdy(dydims, e, dy), sdx(dxdims, e, dx, sc.beta != 0.0);
    with_scaling(dt, sc, sdx.get(), in_n, [&](void* dst) {
      if (max) {
        std::vector<int64_t> indices(out_n);
        std::vector<double> out(out_n);  // room for out_n elements of either type
        ember::kernels::cpu::max_pool2d_forward(dt, DType::i64, g, sx.get(), out.data(), indices.data());
        ember::kernels::cpu::max_pool2d_backward(dt, DType::i64, g, sdy.get(), indices.data(), dst);
      } else {
        ember::kernels::cpu::avg_pool2d_backward(dt, g, include_padding, sdy.get(), dst);
      }
    });
    sdx.commit();
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
  // Elementwise over the memory as it lies: one format for all operands (the shim's restriction).
  if (xd->format != yd->format) return CUDNN_STATUS_NOT_SUPPORTED;
  ember::kernels::UnaryOp op;
  DType dt;
  if (activation_op(ad, &op) != CUDNN_STATUS_SUCCESS ||
      (!computed_type(xd->type, &dt) && !computed_16bit_type(xd->type, &dt)))
    return CUDNN_STATUS_NOT_SUPPORTED;
  const int64_t n = numel(xd);
  const size_t bytes = static_cast<size_t>(n) * elem_size(dt);
  if (const cudnnStatus_t st =
          check_device("cudnnActivationForward", elem_size(dt), {{"x", x, bytes}, {"y", y, bytes}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.activation_forward; });
  count_16bit(&Calls::activation_f16, &Calls::activation_bf16, dt, 0);
  const Scaling sc = read_scaling(dt, alpha, beta);
  // alpha = 1, beta = 0: the 16-bit CPU kernel computes the same float functor and rounds once.
  if (ember::is_low_precision(dt) && (sc.alpha != 1.0 || sc.beta != 0.0)) {
    return in_stream_order(h, [=] {
      compute_16bit(dt, sc, y, static_cast<size_t>(n), [&](float* r) {
        const std::vector<float> x32 = widen(dt, x, static_cast<size_t>(n));
        ember::kernels::cpu::unary(op, DType::f32, flat(n), contiguous(r), contiguous(x32.data()), 0.0);
      });
    });
  }
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
  if (yd->format != xd->format || dyd->format != xd->format || dxd->format != xd->format)
    return CUDNN_STATUS_NOT_SUPPORTED;  // as in the forward
  ember::kernels::UnaryOp op;
  DType dt;
  if (activation_op(ad, &op) != CUDNN_STATUS_SUCCESS ||
      (!computed_type(xd->type, &dt) && !computed_16bit_type(xd->type, &dt)))
    return CUDNN_STATUS_NOT_SUPPORTED;
  const int64_t n = numel(xd);
  const size_t bytes = static_cast<size_t>(n) * elem_size(dt);
  if (const cudnnStatus_t st = check_device("cudnnActivationBackward", elem_size(dt),
                                            {{"y", y, bytes}, {"dy", dy, bytes}, {"x", x, bytes}, {"dx", dx, bytes}});
      st != CUDNN_STATUS_SUCCESS)
    return st;
  count([](Calls& c) { ++c.activation_backward; });
  count_16bit(&Calls::activation_f16, &Calls::activation_bf16, dt, 1);
  const Scaling sc = read_scaling(dt, alpha, beta);
  if (ember::is_low_precision(dt) && (sc.alpha != 1.0 || sc.beta != 0.0)) {  // else as in the forward
    return in_stream_order(h, [=] {
      compute_16bit(dt, sc, dx, static_cast<size_t>(n), [&](float* r) {
        const size_t m = static_cast<size_t>(n);
        const std::vector<float> dy32 = widen(dt, dy, m), x32 = widen(dt, x, m), y32 = widen(dt, y, m);
        ember::kernels::cpu::unary_backward(op, DType::f32, flat(n), contiguous(r), contiguous(dy32.data()),
                                            contiguous(x32.data()), contiguous(y32.data()), 0.0);
      });
    });
  }
  return in_stream_order(h, [=] {
    with_scaling(dt, sc, dx, static_cast<size_t>(n), [&](void* dst) {
      ember::kernels::cpu::unary_backward(op, dt, flat(n), contiguous(dst), contiguous(dy), contiguous(x),
                                          contiguous(y), 0.0);
    });
  });
}

}  // extern "C"
