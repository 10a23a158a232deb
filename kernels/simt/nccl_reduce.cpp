// The arithmetic of the NCCL shim (nccl_shim.cpp): NCCL's data types and reduction ops, and the
// element-wise reduction the last rank of a round computes for ncclAllReduce. Contract in
// nccl_shim.h.
//
// Rank order, not NCCL's order: NCCL's ring and tree algorithms add in an order that depends on the
// algorithm, the channel and the message size, so its float results are not reproducible across
// configurations anyway; the shim promises one simple order instead (rank 0, then 1, ...), which a
// test can compute on the CPU bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "nccl_shim.h"

namespace ember::simt::detail::nccl {

namespace {

// How each element type is reduced: in its own type, except f16 and bf16, which are widened to
// float and rounded once at the end (to nearest even, by the CUDA headers' host conversions). NCCL
// also reduces half types in float, but rounds at every step of its ring.
template <class T>
struct Accumulate {
  using Acc = T;
  static Acc in(T x) { return x; }
  static T out(Acc a) { return a; }
};
template <>
struct Accumulate<__half> {
  using Acc = float;
  static float in(__half x) { return __half2float(x); }
  static __half out(float a) { return __float2half_rn(a); }
};
template <>
struct Accumulate<__nv_bfloat16> {
  using Acc = float;
  static float in(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __nv_bfloat16 out(float a) { return __float2bfloat16_rn(a); }
};

// Integer sums and products wrap around, as on the GPU: computed unsigned, where overflow is
// defined, and converted back (modular since C++20).
template <class A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class A>
A multiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// CUDA's max/min on floats are fmaxf/fminf (a NaN loses to a number), which NCCL's kernels use.
template <class A>
A maximum(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return std::fmax(a, b);
  } else {
    return std::max(a, b);
  }
}
template <class A>
A minimum(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return std::fmin(a, b);
  } else {
    return std::min(a, b);
  }
}

template <class T>
void reduce_as(ncclRedOp_t op, const void* const* send, int nranks, size_t count, void* out) {
  using Acc = typename Accumulate<T>::Acc;
  std::vector<Acc> acc(count);
  const T* x0 = static_cast<const T*>(send[0]);
  for (size_t i = 0; i < count; ++i) acc[i] = Accumulate<T>::in(x0[i]);
  // Rank by rank over whole buffers (not element by element over ranks): the same order per
  // element, and each input is read sequentially.
  for (int q = 1; q < nranks; ++q) {
    const T* x = static_cast<const T*>(send[q]);
    switch (op) {
      case ncclSum:
      case ncclAvg:
        for (size_t i = 0; i < count; ++i) acc[i] = add(acc[i], Accumulate<T>::in(x[i]));
        break;
      case ncclProd:
        for (size_t i = 0; i < count; ++i) acc[i] = multiply(acc[i], Accumulate<T>::in(x[i]));
        break;
      case ncclMax:
        for (size_t i = 0; i < count; ++i) acc[i] = maximum(acc[i], Accumulate<T>::in(x[i]));
        break;
      case ncclMin:
        for (size_t i = 0; i < count; ++i) acc[i] = minimum(acc[i], Accumulate<T>::in(x[i]));
        break;
      default: break;  // rejected by the shim's argument checks
    }
  }
  // The sum divided once by nranks: what NCCL does for integers (sum, then divide). For floats
  // NCCL multiplies every input by 1/nranks before summing, which can differ in the last bit.
  if (op == ncclAvg)
    for (size_t i = 0; i < count; ++i) acc[i] = static_cast<Acc>(acc[i] / static_cast<Acc>(nranks));
  std::vector<T> result(count);
  for (size_t i = 0; i < count; ++i) result[i] = Accumulate<T>::out(acc[i]);
  std::memcpy(out, result.data(), count * sizeof(T));
}

}  // namespace

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "an invalid type";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "an invalid op";
  }
}

void reduce(ncclDataType_t type, ncclRedOp_t op, const void* const* send, int nranks, size_t count, void* out) {
  switch (type) {
    case ncclInt8: return reduce_as<int8_t>(op, send, nranks, count, out);
    case ncclUint8: return reduce_as<uint8_t>(op, send, nranks, count, out);
    case ncclInt32: return reduce_as<int32_t>(op, send, nranks, count, out);
    case ncclUint32: return reduce_as<uint32_t>(op, send, nranks, count, out);
    case ncclInt64: return reduce_as<int64_t>(op, send, nranks, count, out);
    case ncclUint64: return reduce_as<uint64_t>(op, send, nranks, count, out);
    case ncclFloat16: return reduce_as<__half>(op, send, nranks, count, out);
    case ncclFloat32: return reduce_as<float>(op, send, nranks, count, out);
    case ncclFloat64: return reduce_as<double>(op, send, nranks, count, out);
    case ncclBfloat16: return reduce_as<__nv_bfloat16>(op, send, nranks, count, out);
    default: break;  // rejected by the shim's argument checks
  }
}

}  // namespace ember::simt::detail::nccl
