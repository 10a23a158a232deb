// CPU reductions.
//
// The reference strategy: iterate over output positions (in parallel), and for each one walk the
// reduced sub-space of the input (ReduceIndexer maps positions to strided offsets). Accumulation
// is in A = cpu_acc_t<T>: double for f32 and f64, so float32 sums of millions of elements stay
// accurate; float for f16 and bf16 (Note [Accumulation types] in core/dtype.h). Each output
// position is computed by one thread in a fixed order, so results do not depend on the thread
// count.

#include "reduce.h"

#include <cmath>
#include <type_traits>

#include "../../core/error.h"
#include "../../core/cpu/parallel.h"


namespace ember::kernels::cpu {

namespace {

// NaN test that also compiles for integer types (where it is always false).
template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T> || is_low_precision_v<T>) return std::isnan(static_cast<acc_t<T>>(v));
  else return false;
}

// Whether `v` replaces the current best `best`: strictly better (so the first occurrence wins a
// tie), or NaN (NaN propagates: once best is NaN nothing replaces it).
template <typename T>
bool better(Extremum kind, T v, T best) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return kind == Extremum::Max ? v > best : v < best;
}

}  // namespace

void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "sum", [&] {
    using T = scalar_t;
    using A = cpu_acc_t<T>;
    const ReduceIndexer ix(in_shape, out_shape);
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* x = src + ix.base(o, in);
        A acc = 0;
        for (int64_t j = 0; j < ix.n_red; ++j) acc += static_cast<A>(x[ix.offset(j, in)]);
        dst[ix.base(o, out)] = static_cast<T>(acc);
      }
    });
  });
}

void var(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape,
         int64_t correction) {
  EMBER_DISPATCH_FLOATING(dtype, "var", [&] {
    using T = scalar_t;
    using A = cpu_acc_t<T>;
    const ReduceIndexer ix(in_shape, out_shape);
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    // Two passes (mean, then squared deviations) rather than sum and sum of squares: the
    // one-pass formula cancels catastrophically when the mean is large against the spread.
    const A divisor = static_cast<A>(std::max<int64_t>(0, ix.n_red - correction));
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* x = src + ix.base(o, in);
        A total = 0;
        for (int64_t j = 0; j < ix.n_red; ++j) total += static_cast<A>(x[ix.offset(j, in)]);
        const A mean = total / static_cast<A>(ix.n_red);  // NaN when n_red == 0
        A ss = 0;
        for (int64_t j = 0; j < ix.n_red; ++j) {
          const A d = static_cast<A>(x[ix.offset(j, in)]) - mean;
          ss += d * d;
        }
        dst[ix.base(o, out)] = static_cast<T>(ix.n_red == 0 ? static_cast<A>(NAN) : ss / divisor);
      }
    });
  });
}

void extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand out,
              const IterShape& out_shape) {
  EMBER_DISPATCH_ORDERED(dtype, kind == Extremum::Max ? "amax" : "amin", [&] {
    using T = scalar_t;
    const ReduceIndexer ix(in_shape, out_shape);
    EMBER_CHECK(ix.n_red > 0 || ix.n_out == 0, "extremum: empty reduction");
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* x = src + ix.base(o, in);
        T best = x[0];
        for (int64_t j = 1; j < ix.n_red; ++j) {
          const T v = x[ix.offset(j, in)];
          if (better(kind, v, best)) best = v;
        }
        dst[ix.base(o, out)] = best;
      }
    });
  });
}

void extremum_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand x, Operand value,
                       Operand grad_out, const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "amax backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const ReduceIndexer ix(in_shape, out_shape);
    T* gi = static_cast<T*>(grad_in.data);
    const T* xs = static_cast<const T*>(x.data);
    const T* vs = static_cast<const T*>(value.data);
    const T* go = static_cast<const T*>(grad_out.data);
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T v = vs[ix.base(o, value)];
        const T* xo = xs + ix.base(o, x);
        T* gio = gi + ix.base(o, grad_in);
        auto matches = [&](T e) { return e == v || (is_nan(e) && is_nan(v)); };
        int64_t count = 0;
        for (int64_t j = 0; j < ix.n_red; ++j) count += matches(xo[ix.offset(j, x)]) ? 1 : 0;
        const T share =
            count > 0 ? static_cast<T>(static_cast<A>(go[ix.base(o, grad_out)]) / static_cast<A>(count)) : T(0);
        for (int64_t j = 0; j < ix.n_red; ++j)
          gio[ix.offset(j, grad_in)] = matches(xo[ix.offset(j, x)]) ? share : T(0);
      }
    });
  });
}

void arg_extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand values,
                  Operand indices, const IterShape& out_shape) {
  EMBER_DISPATCH_ORDERED(dtype, kind == Extremum::Max ? "argmax" : "argmin", [&] {
    using T = scalar_t;
    const ReduceIndexer ix(in_shape, out_shape);
    EMBER_CHECK(ix.n_red > 0 || ix.n_out == 0, "arg_extremum: empty reduction");
    const T* src = static_cast<const T*>(in.data);
    T* val = static_cast<T*>(values.data);  // may be null
    int64_t* idx = static_cast<int64_t*>(indices.data);
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* x = src + ix.base(o, in);
        T best = x[0];
        int64_t best_j = 0;
        for (int64_t j = 1; j < ix.n_red; ++j) {
          const T v = x[ix.offset(j, in)];
          if (better(kind, v, best)) {
            best = v;
            best_j = j;
          }
        }
        idx[ix.base(o, indices)] = best_j;
        if (val) val[ix.base(o, values)] = best;
      }
    });
  });
}

void index_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand grad_out, Operand indices,
                    const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "max backward", [&] {
    using T = scalar_t;
    const ReduceIndexer ix(in_shape, out_shape);
    T* gi = static_cast<T*>(grad_in.data);
    const T* go = static_cast<const T*>(grad_out.data);
    const int64_t* idx = static_cast<const int64_t*>(indices.data);
    parallel_for(0, ix.n_out, ix.grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const int64_t chosen = idx[ix.base(o, indices)];
        const T g = go[ix.base(o, grad_out)];
        T* gio = gi + ix.base(o, grad_in);
        for (int64_t j = 0; j < ix.n_red; ++j) gio[ix.offset(j, grad_in)] = j == chosen ? g : T(0);
      }
    });
  });
}

}  // namespace ember::kernels::cpu
