#pragma once
// Running a CPU kernel on f16/bf16 data through its f32 version (internal to kernels/cpu).
//
// Note [Low-precision CPU kernels through f32]
// The CPU kernels with a direct loop per element or per line (elementwise, reductions, softmax)
// compute f16/bf16 in place: load, widen to float, compute, round once on store. The kernels
// with larger bodies — pooling, the losses — run f16/bf16 through their f32 version
// instead: each 16-bit input array is widened into a float buffer (exact: every f16 and bf16
// value is a float), the f32 kernel runs on the buffers, and each output is rounded to the
// 16-bit type once, when it is copied back. The arithmetic is then the f32 reference's, which
// accumulates in cpu_acc_t<float> = double (Note [Accumulation types] in core/dtype.h) — at
// least as accurate as float accumulation, so the CPU stays the reference that CUDA's f16/bf16
// kernels are compared with. The cost is one float copy of each operand, small beside the
// kernels' own passes over the data; f16 and bf16 widen and round 16 elements at a time on AVX-512 CPUs
// (Note [Vectorized bf16 conversion on the CPU] in bf16_convert.h). (bf16 and f16 max pooling picks
// values without arithmetic, so it widens a plane at a time instead, and its non-overlapping
// backward copies the 16-bit gradients directly: kernels/cpu/pool.cpp.)
//
//   const Widened xf(dtype, x, n);        // n elements of x (f16 or bf16) as floats
//   Widened yf(dtype, nullptr, m);        // an f32 output buffer of m elements (zeros)
//   kernel(DType::f32, ..., xf.data(), yf.data());
//   yf.store(y);                          // rounds each element to dtype into y

#include <cstdint>
#include <vector>

#include "../../core/dtype.h"
#include "../../core/error.h"
#include "bf16/bf16_convert.h"

namespace ember::kernels::cpu {

class Widened {
 public:
  // n elements of `src` (dtype f16 or bf16) as floats; src may be null (zeros: an output buffer).
  Widened(DType dtype, const void* src, int64_t n) : dtype_(dtype), v_(static_cast<size_t>(n), 0.0f) {
    EMBER_CHECK(is_low_precision(dtype), "Widened: expected float16 or bfloat16, got ", dtype);
    if (src == nullptr) return;
    if (dtype == DType::f16) widen(static_cast<const Half*>(src));
    else widen(static_cast<const BFloat16*>(src));
  }
  float* data() { return v_.empty() ? nullptr : v_.data(); }
  const float* data() const { return v_.empty() ? nullptr : v_.data(); }
  // Rounds every element to the 16-bit dtype (to nearest even) into dst.
  void store(void* dst) const {
    if (dtype_ == DType::f16) narrow(static_cast<Half*>(dst));
    else narrow(static_cast<BFloat16*>(dst));
  }

 private:
  // 16 elements at a time where the CPU can (bf16_convert.h), with the scalar conversion's bits.
  template <typename T>
  void widen(const T* src) {
    to_f32(src, v_.data(), static_cast<int64_t>(v_.size()));
  }
  template <typename T>
  void narrow(T* dst) const {
    from_f32(v_.data(), dst, static_cast<int64_t>(v_.size()));
  }

  DType dtype_;
  std::vector<float> v_;
};

// A Widened copy of an optional array (null stays null: e.g. a missing weight or bias).
inline const float* widened_or_null(const Widened& w, const void* src) { return src ? w.data() : nullptr; }

}  // namespace ember::kernels::cpu
