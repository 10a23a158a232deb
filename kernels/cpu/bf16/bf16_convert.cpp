// bf16 <-> f32 and f16 <-> f32 conversion and the 16-bit ReLU loops: Note [Vectorized bf16
// conversion on the CPU] in bf16_convert.h.

#include "bf16_convert.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "../../elementwise.h"
#include "bf16_simd.h"
#include "../../../core/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_BF16_CONVERT_X86 1
#else
#define EMBER_BF16_CONVERT_X86 0
#endif

namespace ember::kernels::cpu {

// ---- scalar --------------------------------------------------------------------------------------

namespace {

template <typename T>
void to_f32_scalar(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
template <typename T>
void from_f32_scalar(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = T(src[i]);
}
template <typename T>
void relu_scalar(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = T(ops::Relu::fwd(static_cast<float>(x[i]), 0.0f));
}
template <typename T>
void relu_backward_scalar(const T* g, const T* y, T* gi, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gi[i] = T(ops::Relu::bwd(static_cast<float>(g[i]), 0.0f, static_cast<float>(y[i]), 0.0f));
}

}  // namespace

void bf16_to_f32_scalar(const BFloat16* src, float* dst, int64_t n) { to_f32_scalar(src, dst, n); }
void f32_to_bf16_scalar(const float* src, BFloat16* dst, int64_t n) { from_f32_scalar(src, dst, n); }
void relu_bf16_scalar(const BFloat16* x, BFloat16* y, int64_t n) { relu_scalar(x, y, n); }
void relu_backward_bf16_scalar(const BFloat16* g, const BFloat16* y, BFloat16* gi, int64_t n) {
  relu_backward_scalar(g, y, gi, n);
}
void f16_to_f32_scalar(const Half* src, float* dst, int64_t n) { to_f32_scalar(src, dst, n); }
void f32_to_f16_scalar(const float* src, Half* dst, int64_t n) { from_f32_scalar(src, dst, n); }
void relu_f16_scalar(const Half* x, Half* y, int64_t n) { relu_scalar(x, y, n); }
void relu_backward_f16_scalar(const Half* g, const Half* y, Half* gi, int64_t n) { relu_backward_scalar(g, y, gi, n); }

void relu_f32_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ops::Relu::fwd(x[i], 0.0f);
}
void relu_backward_f32_scalar(const float* g, const float* y, float* gi, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gi[i] = ops::Relu::bwd(g[i], 0.0f, y[i], 0.0f);
}

// ---- AVX-512 (F + BW) ------------------------------------------------------------------------------

namespace {

#if EMBER_BF16_CONVERT_X86
#define EMBER_AVX512_TARGET EMBER_BF16_SIMD_TARGET

// The low `k` lanes, 0 < k < 16 (the tail of an array).
inline __mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

// T is BFloat16 or Half: widen16 and narrow16 (bf16_simd.h) convert either.
template <typename T>
EMBER_AVX512_TARGET void to_f32_avx512(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, widen16(src + i));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, widen16(src + i, m));
  }
}

template <typename T>
EMBER_AVX512_TARGET void from_f32_avx512(const float* src, T* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) narrow16(_mm512_loadu_ps(src + i), dst + i);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    narrow16(_mm512_maskz_loadu_ps(m, src + i), dst + i, m);
  }
}

// ops::Relu::fwd: x <= 0 ? 0 : x (a NaN is not <= 0, so it passes through and is quieted on store).
template <typename T>
EMBER_AVX512_TARGET void relu_avx512(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = i + 16 <= n ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512 v = widen16(x + i, m);
    const __mmask16 le = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ);
    narrow16(_mm512_maskz_mov_ps(static_cast<__mmask16>(~le), v), y + i, m);
  }
}

// ops::Relu::bwd: y > 0 ? g : 0.
template <typename T>
EMBER_AVX512_TARGET void relu_backward_avx512(const T* g, const T* y, T* gi, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = i + 16 <= n ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __mmask16 gt = _mm512_cmp_ps_mask(widen16(y + i, m), _mm512_setzero_ps(), _CMP_GT_OQ);
    narrow16(_mm512_maskz_mov_ps(gt, widen16(g + i, m)), gi + i, m);
  }
}

// ops::Relu::fwd: x <= 0 ? +0 : x (an ordered compare: NaN is not <= 0 and passes through).
__attribute__((target("avx512f"))) void relu_f32_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = i + 16 <= n ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __mmask16 le = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mask_blend_ps(le, v, _mm512_setzero_ps()));
  }
}

// ops::Relu::bwd: y > 0 ? g : +0.
__attribute__((target("avx512f"))) void relu_backward_f32_avx512(const float* g, const float* y, float* gi, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = i + 16 <= n ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __mmask16 gt = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, y + i), _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_mask_storeu_ps(gi + i, m, _mm512_maskz_loadu_ps(gt & m, g + i));
  }
}
#endif

bool vectorized_default() {
#if EMBER_BF16_CONVERT_X86
  const char* env = std::getenv("EMBER_CPU_BF16_CONVERT");
  if (env && std::string(env) == "scalar") return false;
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl;
#else
  return false;
#endif
}

}  // namespace

bool bf16_convert_vectorized() {
  static const bool on = vectorized_default();
  return on;
}

// The public loops: the AVX-512 template where the CPU can, the scalar loop elsewhere.
#if EMBER_BF16_CONVERT_X86
#define EMBER_CONVERT_PATHS(vector_call, scalar_call)   \
  if (bf16_convert_vectorized()) return vector_call;    \
  scalar_call
#else
#define EMBER_CONVERT_PATHS(vector_call, scalar_call) scalar_call
#endif

void bf16_to_f32(const BFloat16* src, float* dst, int64_t n) {
  EMBER_CONVERT_PATHS(to_f32_avx512(src, dst, n), to_f32_scalar(src, dst, n));
}
void f32_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  EMBER_CONVERT_PATHS(from_f32_avx512(src, dst, n), from_f32_scalar(src, dst, n));
}
void relu_bf16(const BFloat16* x, BFloat16* y, int64_t n) {
  EMBER_CONVERT_PATHS(relu_avx512(x, y, n), relu_scalar(x, y, n));
}
void relu_backward_bf16(const BFloat16* g, const BFloat16* y, BFloat16* gi, int64_t n) {
  EMBER_CONVERT_PATHS(relu_backward_avx512(g, y, gi, n), relu_backward_scalar(g, y, gi, n));
}
void f16_to_f32(const Half* src, float* dst, int64_t n) {
  EMBER_CONVERT_PATHS(to_f32_avx512(src, dst, n), to_f32_scalar(src, dst, n));
}
void f32_to_f16(const float* src, Half* dst, int64_t n) {
  EMBER_CONVERT_PATHS(from_f32_avx512(src, dst, n), from_f32_scalar(src, dst, n));
}
void relu_f16(const Half* x, Half* y, int64_t n) { EMBER_CONVERT_PATHS(relu_avx512(x, y, n), relu_scalar(x, y, n)); }
void relu_backward_f16(const Half* g, const Half* y, Half* gi, int64_t n) {
  EMBER_CONVERT_PATHS(relu_backward_avx512(g, y, gi, n), relu_backward_scalar(g, y, gi, n));
}

void relu_f32(const float* x, float* y, int64_t n) {
#if EMBER_BF16_CONVERT_X86
  if (cpu_features().avx512f) return relu_f32_avx512(x, y, n);
#endif
  relu_f32_scalar(x, y, n);
}

void relu_backward_f32(const float* g, const float* y, float* gi, int64_t n) {
#if EMBER_BF16_CONVERT_X86
  if (cpu_features().avx512f) return relu_backward_f32_avx512(g, y, gi, n);
#endif
  relu_backward_f32_scalar(g, y, gi, n);
}

}  // namespace ember::kernels::cpu
