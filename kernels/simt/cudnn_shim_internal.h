#pragma once
// What the two files of the emulator's cuDNN shim share: the descriptor structs, the registries of
// live objects, the call counters, and the checks and helpers every call uses. cudnn_shim.cpp has
// handles, tensor descriptors, cudnnAddTensor, pooling and activations (and defines the
// registries and counters declared here); cudnn_shim_conv.cpp has filter and convolution
// descriptors, the algorithm choice and the convolutions. Included only by those two files.

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "../../core/dtype.h"
#include "cudnn_shim.h"
#include "shim_memory.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;  // NCHW or NHWC (Note [The shim's memory formats])
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

namespace ember::simt::cudnn_shim::detail {

using ember::DType;

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

// The registries (defined in cudnn_shim.cpp).
extern Live<cudnnContext> g_handles;
extern Live<cudnnTensorStruct> g_tensors;
extern Live<cudnnFilterStruct> g_filters;
extern Live<cudnnConvolutionStruct> g_convs;
extern Live<cudnnPoolingStruct> g_pools;
extern Live<cudnnActivationStruct> g_acts;

// ---- counters (cudnn_shim.h) ----------------------------------------------------------------------

// Defined in cudnn_shim.cpp; read by calls().
extern std::mutex g_calls_mu;
extern Calls g_calls;

template <typename F>
void count(F f) {
  std::lock_guard<std::mutex> lock(g_calls_mu);
  f(g_calls);
}

// ---- checks ------------------------------------------------------------------------------------

inline bool valid_type(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

// The ember dtype the shim computes a cuDNN data type in; false for the types it does not compute.
inline bool computed_type(cudnnDataType_t t, DType* out) {
  if (t == CUDNN_DATA_FLOAT)
    *out = DType::f32;
  else if (t == CUDNN_DATA_DOUBLE)
    *out = DType::f64;
  else
    return false;
  return true;
}

// The 16-bit data types the shim computes (convolutions, bias gradients, cudnnAddTensor).
inline bool computed_16bit_type(cudnnDataType_t t, DType* out) {
  if (t == CUDNN_DATA_HALF)
    *out = DType::f16;
  else if (t == CUDNN_DATA_BFLOAT16)
    *out = DType::bf16;
  else
    return false;
  return true;
}

inline size_t elem_size(DType dt) { return static_cast<size_t>(ember::dtype_size(dt)); }

// A 16-bit buffer of n elements widened to float (exact).
inline std::vector<float> widen(DType dt, const void* p, size_t n) {
  std::vector<float> r(n);
  if (dt == DType::f16)
    for (size_t i = 0; i < n; ++i) r[i] = static_cast<float>(static_cast<const ember::Half*>(p)[i]);
  else
    for (size_t i = 0; i < n; ++i) r[i] = static_cast<float>(static_cast<const ember::BFloat16*>(p)[i]);
  return r;
}

// out (n elements of 16-bit dt) = round(alpha * r + beta * out), in float, rounded once; out is not
// read when beta == 0 (cuDNN's rule).
inline void round_blend(DType dt, void* out, const float* r, size_t n, float alpha, float beta) {
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

inline int64_t numel(const cudnnTensorStruct* t) { return int64_t{t->n} * t->c * t->h * t->w; }

inline bool same_dims(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
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
inline cudnnStatus_t check_device(const char* fn, size_t align, std::initializer_list<Operand> ops) {
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

inline cudnnStatus_t sync(cudnnHandle_t h) {
  return ember::simt::synchronize_stream(h->stream) == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

// The computation in stream order on the handle's stream: now, or a node of a capture (Find,
// which measures on the host, stays outside: it synchronizes, and a capture refuses that).
inline cudnnStatus_t in_stream_order(cudnnHandle_t h, std::function<void()> work) {
  return ember::simt::run_in_stream_order(h->stream, std::move(work)) == cudaSuccess ? CUDNN_STATUS_SUCCESS
                                                                                     : CUDNN_STATUS_EXECUTION_FAILED;
}

// out[i] = alpha * r[i] + beta * out[i] over n elements, out not read when beta == 0 (cuDNN's
// rule); alpha = 1, beta = 0 copies r bit for bit.
template <typename T>
inline void blend(T* out, const T* r, size_t n, T alpha, T beta) {
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

// ---- memory formats ----------------------------------------------------------------------------

// Note [The shim's memory formats]
// A tensor or filter descriptor may be CUDNN_TENSOR_NCHW or CUDNN_TENSOR_NHWC (channels-last: the
// same (n, c, h, w) tensor with c fastest in memory; a filter (k, c, h, w) is then (k, h, w, c) in
// memory). The CPU kernels the shim computes with read NCHW, so a call stages every NHWC operand
// through an NCHW copy: inputs are copied in, the result is computed into an NCHW buffer (holding
// the output's current values when beta != 0, since the blend reads them) and copied back out.
// The copies move values without rounding, so an NHWC call gives exactly the NCHW call's values.
// On a GPU cuDNN's NHWC kernels read the layout directly; NCHW_VECT_C is NOT_SUPPORTED here.

// A 4-D operand: its (n, c, h, w) sizes and whether its memory is NHWC.
struct Dims4 {
  int64_t n = 0, c = 0, h = 0, w = 0;
  bool nhwc = false;
  int64_t numel() const { return n * c * h * w; }
};
inline Dims4 dims_of(const cudnnTensorStruct* t) {
  return Dims4{t->n, t->c, t->h, t->w, t->format == CUDNN_TENSOR_NHWC};
}
inline Dims4 dims_of(const cudnnFilterStruct* f) {
  return Dims4{f->k, f->c, f->h, f->w, f->format == CUDNN_TENSOR_NHWC};
}

// Copies the e-byte elements of d between its NHWC memory and NCHW order (to_nchw: src is NHWC).
inline void permute_nhwc(const Dims4& d, size_t e, const void* src, void* dst, bool to_nchw) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* o = static_cast<unsigned char*>(dst);
  size_t i = 0;  // the NCHW index
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t y = 0; y < d.h; ++y)
        for (int64_t x = 0; x < d.w; ++x, ++i) {
          const auto j = static_cast<size_t>(((n * d.h + y) * d.w + x) * d.c + c);  // the NHWC index
          if (to_nchw)
            std::memcpy(o + i * e, s + j * e, e);
          else
            std::memcpy(o + j * e, s + i * e, e);
        }
}

// An operand as NCHW memory: the pointer itself for NCHW, a staged copy for NHWC. An output is
// written back by commit(); `keep` copies its current values in first (a blend with beta != 0).
class Nchw {
 public:
  Nchw(const Dims4& d, size_t e, const void* p) : d_(d), e_(e), p_(const_cast<void*>(p)) {
    if (d_.nhwc) {
      stage_.resize(static_cast<size_t>(d_.numel()) * e_);
      permute_nhwc(d_, e_, p_, stage_.data(), true);
    }
  }
  Nchw(const Dims4& d, size_t e, void* p, bool keep) : d_(d), e_(e), p_(p) {
    if (d_.nhwc) {
      stage_.resize(static_cast<size_t>(d_.numel()) * e_);
      if (keep) permute_nhwc(d_, e_, p_, stage_.data(), true);
    }
  }
  void* get() { return d_.nhwc ? static_cast<void*>(stage_.data()) : p_; }
  void commit() {
    if (d_.nhwc) permute_nhwc(d_, e_, stage_.data(), p_, false);
  }

 private:
  Dims4 d_;
  size_t e_;
  void* p_;
  std::vector<unsigned char> stage_;
};

// alpha and beta, read from the host when the call is made (they are float for float data and
// double for double, as cuDNN takes them; a float is exact as a double).
struct Scaling {
  double alpha, beta;
};
inline Scaling read_scaling(DType dt, const void* alpha, const void* beta) {
  if (dt == DType::f64) return {*static_cast<const double*>(alpha), *static_cast<const double*>(beta)};
  return {*static_cast<const float*>(alpha), *static_cast<const float*>(beta)};
}

// Runs `compute(dst)` so that `out` (n elements of dt) ends up alpha * result + beta * out: into
// out directly for the plain alpha = 1, beta = 0, through a scratch buffer otherwise.
template <typename Compute>
inline void with_scaling(DType dt, Scaling scaling, void* out, size_t n, Compute compute) {
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

}  // namespace ember::simt::cudnn_shim::detail
