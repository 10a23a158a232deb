// Compiled by nvcc in the CUDA flavour so that everything CUDA code will include — the public
// headers and the __host__ __device__ functors of kernels/elementwise.h and core/philox.h —
// keeps compiling as device code. The CUDA backend issue replaces this file with the real
// kernels (executed on a GPU, and on the CPU through the SIMT flavour).

#include "launch.h"

#include <ember/core/philox.h>
#include <ember/ember.h>
#include <ember/kernels/elementwise.h>

namespace ember::kernels {

// Instantiates each functor in device code (never launched: this translation unit only proves
// that the shared math compiles for the GPU).
template <typename Op>
__device__ float instantiate_unary(float x) {
  return Op::fwd(x, 0.5f) + Op::bwd(1.0f, x, x, 0.5f);
}

__device__ float compile_check_all(float x) {
  float s = 0;
  s += instantiate_unary<ops::Exp>(x) + instantiate_unary<ops::Log>(x) + instantiate_unary<ops::Sigmoid>(x);
  s += instantiate_unary<ops::Tanh>(x) + instantiate_unary<ops::Gelu>(x) + instantiate_unary<ops::GeluTanh>(x);
  s += instantiate_unary<ops::Silu>(x) + instantiate_unary<ops::Relu>(x) + instantiate_unary<ops::LeakyRelu>(x);
  s += instantiate_unary<ops::PowScalar>(x) + instantiate_unary<ops::Rsqrt>(x) + instantiate_unary<ops::Abs>(x);
  const Philox4 r = philox4x32_10(7, 42);
  s += philox_normal_f32(r.v[0], r.v[1]) + static_cast<float>(Half(x)) + static_cast<float>(BFloat16(x));
  return s;
}

}  // namespace ember::kernels
