// CUDA reductions (contracts in reduce.h; the CPU reference is kernels/cpu/reduce.cpp).
//
// Parallel decomposition: every output position o is owned by a *group* of G threads (one
// thread, one warp, or a whole block of 256, chosen from the reduction's length on the host).
// The G threads stride over the n_red reduced elements of o — lane l takes j = l, l + G, ... —
// so when the reduced dim is contiguous neighbouring lanes read neighbouring addresses
// (coalesced). Each thread accumulates privately, then the group combines: warp shuffles
// inside a warp (no shared memory, no barrier), plus one shared-memory exchange across the 8
// warps of a block (detail::group_all_reduce). Groups take outputs with a grid stride. Short
// reductions with many outputs use G = 1: neighbouring threads own neighbouring outputs.
//
// Note [Split sums]
// One group per output leaves a GPU idle when there are few outputs and many elements each: a
// full sum of 2^26 floats was one block of 256 threads, 2.4 GB/s on an H200 (copy: 3,800 GB/s).
// When the block groups would fill under two blocks per SM, each output's reduced elements are
// cut into `splits` contiguous slices, one block per (output, slice) (blockIdx.x = output,
// blockIdx.y = slice), each writing one acc_t partial; a finalize kernel (one thread per output)
// adds an output's partials in slice order and rounds once. The slices are fixed by the shape and
// the device's SM count, so a result is the same from run to run (the batch-norm statistics do
// the same: Note [Split channel reductions] in batchnorm.cu).
//
// Accumulation: sums and variances accumulate in acc_t<T> (Note [Accumulation types] in
// core/dtype.h): float for f16, bf16 and f32, double for f64. The CPU reference sums f32 in
// double, so f32 results differ from it by the float accumulation's rounding (a relative error
// of about log2(n) ulp for the tree of partial sums here) and f64 within a few ulp. max/min/argmax/argmin are exact:
// a (value, index) pair with "first NaN, else extreme value, ties to the lower index" is an
// associative and commutative choice, so any reduction tree picks the CPU's element.

#include "launch.h"

#include "reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../../core/error.h"
#include "common.cuh"
#include "../../core/cuda/runtime.h"


namespace ember::kernels::gpu {

namespace {

using detail::group_all_reduce;
using detail::group_sum;
using detail::kThreads;
using detail::with_group;

// ReduceIndexer (kernels/reduce.h) as a plain struct the kernels take by value: kept dims (output
// positions) and reduced dims (elements of one output), row-major each.
struct Indexer {
  int64_t sizes[kMaxDims] = {};
  int kept[kMaxDims] = {}, red[kMaxDims] = {};
  int nk = 0, nr = 0;
  int64_t n_out = 1, n_red = 1;

  explicit Indexer(const ReduceIndexer& ix) : nk(ix.nk), nr(ix.nr), n_out(ix.n_out), n_red(ix.n_red) {
    for (int d = 0; d < ix.shape.ndim; ++d) sizes[d] = ix.shape.sizes[d];
    for (int i = 0; i < nk; ++i) kept[i] = ix.kept[i];
    for (int i = 0; i < nr; ++i) red[i] = ix.red[i];
  }
  // Offset in an operand (its strides) of the first element of output position o.
  __host__ __device__ int64_t base(int64_t o, const int64_t* strides) const {
    int64_t off = 0;
    for (int i = nk - 1; i >= 0; --i) {
      const int d = kept[i];
      off += (o % sizes[d]) * strides[d];
      o /= sizes[d];
    }
    return off;
  }
  // Offset, relative to base(), of reduced element j.
  __host__ __device__ int64_t offset(int64_t j, const int64_t* strides) const {
    if (nr == 1) return j * strides[red[0]];
    int64_t off = 0;
    for (int i = nr - 1; i >= 0; --i) {
      const int d = red[i];
      off += (j % sizes[d]) * strides[d];
      j /= sizes[d];
    }
    return off;
  }
};

// Group size for a reduction: one thread per output when each output is short, or when the
// reduced elements are far apart in memory and there are outputs enough to keep a GPU busy
// (then neighbouring threads read neighbouring outputs' elements); a warp up to 1024 elements;
// a block beyond.
int group_size(const Indexer& ix, const Operand& in) {
  int64_t inner_stride = 1;
  if (ix.nr > 0) inner_stride = in.strides[ix.red[ix.nr - 1]];
  if (ix.n_red <= 16 || (inner_stride != 1 && ix.n_out >= 4096)) return 1;
  if (ix.n_red <= 1024) return detail::kWarp;
  return kThreads;
}

template <typename T>
__device__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T> || is_low_precision_v<T>) return v != v;  // Half: as float
  else return false;
}

// ---- sum and var ---------------------------------------------------------------------------------

template <int G, typename T>
__global__ void sum_kernel(Indexer ix, Operand in, Operand out) {
  EMBER_GROUP_LOOP(G, ix.n_out, o, lane) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data) + ix.base(o, in.strides);
    A acc = 0;
    for (int64_t j = lane; j < ix.n_red; j += G) acc += static_cast<A>(x[ix.offset(j, in.strides)]);
    acc = group_sum<G>(acc);
    if (lane == 0) static_cast<T*>(out.data)[ix.base(o, out.strides)] = static_cast<T>(acc);
  }
}

// Note [Split sums]: block (o, s) sums slice s of output o into partial[o * gridDim.y + s].
template <typename T>
__global__ void sum_partial_kernel(Indexer ix, Operand in, int64_t slice, acc_t<T>* partial) {
  using A = acc_t<T>;
  const int64_t o = blockIdx.x, first = blockIdx.y * slice;
  const int64_t last = first + slice < ix.n_red ? first + slice : ix.n_red;
  const T* x = static_cast<const T*>(in.data) + ix.base(o, in.strides);
  A acc = 0;
  for (int64_t j = first + threadIdx.x; j < last; j += kThreads) acc += static_cast<A>(x[ix.offset(j, in.strides)]);
  acc = group_sum<kThreads>(acc);
  if (threadIdx.x == 0) partial[o * gridDim.y + blockIdx.y] = acc;
}

template <typename T>
__global__ void sum_finalize_kernel(Indexer ix, int64_t splits, const acc_t<T>* partial, Operand out) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < ix.n_out; o += int64_t{gridDim.x} * blockDim.x) {
    acc_t<T> acc = 0;
    for (int64_t s = 0; s < splits; ++s) acc += partial[o * splits + s];
    static_cast<T*>(out.data)[ix.base(o, out.strides)] = static_cast<T>(acc);
  }
}

// Slices per output (Note [Split sums]): 1 unless the outputs are too few to give every SM two
// blocks; then enough for about four blocks per SM, each with at least 16 elements per thread.
int64_t sum_splits(const Indexer& ix, int group) {
  if (group != kThreads) return 1;
  const int64_t sms = cuda::properties(cuda::current_device()).multiprocessor_count;
  if (ix.n_out >= 2 * sms) return 1;
  const int64_t fill = (4 * sms + ix.n_out - 1) / ix.n_out;
  const int64_t useful = ix.n_red / (int64_t{kThreads} * 16);
  return std::max<int64_t>(1, std::min<int64_t>({fill, useful, 65535}));
}

// Two passes over the group's elements, as the CPU: the mean, then the squared deviations.
template <int G, typename T>
__global__ void var_kernel(Indexer ix, Operand in, Operand out, acc_t<T> divisor) {
  EMBER_GROUP_LOOP(G, ix.n_out, o, lane) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.data) + ix.base(o, in.strides);
    A total = 0;
    for (int64_t j = lane; j < ix.n_red; j += G) total += static_cast<A>(x[ix.offset(j, in.strides)]);
    const A mean = group_sum<G>(total) / static_cast<A>(ix.n_red);
    A ss = 0;
    for (int64_t j = lane; j < ix.n_red; j += G) {
      const A d = static_cast<A>(x[ix.offset(j, in.strides)]) - mean;
      ss += d * d;
    }
    ss = group_sum<G>(ss);
    if (lane == 0) {
      const A v = ix.n_red == 0 ? static_cast<A>(NAN) : ss / divisor;
      static_cast<T*>(out.data)[ix.base(o, out.strides)] = static_cast<T>(v);
    }
  }
}

// ---- max / min / argmax / argmin ----------------------------------------------------------------

// A candidate: value v at reduced position j (j < 0: no element seen yet).
template <typename T>
struct Best {
  T v;
  int64_t j;
};

// The CPU's choice as a commutative, associative combine: the first NaN wins; otherwise the
// larger (smaller) value; equal values (including -0 == +0) go to the lower index.
template <typename T, Extremum kKind>
struct PickBest {
  __device__ Best<T> operator()(Best<T> a, Best<T> b) const {
    if (a.j < 0) return b;
    if (b.j < 0) return a;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.j < b.j ? a : b;
      return an ? a : b;
    }
    if (a.v == b.v) return a.j < b.j ? a : b;
    if constexpr (kKind == Extremum::Max) return a.v > b.v ? a : b;
    else return a.v < b.v ? a : b;
  }
};
struct BestShfl {
  template <typename T>
  __device__ Best<T> operator()(Best<T> b, int m) const {
    return Best<T>{detail::shfl_xor(b.v, m), detail::shfl_xor(b.j, m)};
  }
};

// Writes the value (values.data may be null) and/or the index of the chosen element.
template <int G, typename T, Extremum kKind>
__global__ void extremum_kernel(Indexer ix, Operand in, Operand values, Operand indices) {
  EMBER_GROUP_LOOP(G, ix.n_out, o, lane) {
    const T* x = static_cast<const T*>(in.data) + ix.base(o, in.strides);
    const PickBest<T, kKind> pick;
    Best<T> best{T(0), -1};
    for (int64_t j = lane; j < ix.n_red; j += G) best = pick(best, Best<T>{x[ix.offset(j, in.strides)], j});
    best = group_all_reduce<G>(best, pick, BestShfl{});
    if (lane == 0) {
      if (values.data) static_cast<T*>(values.data)[ix.base(o, values.strides)] = best.v;
      if (indices.data) static_cast<int64_t*>(indices.data)[ix.base(o, indices.strides)] = best.j;
    }
  }
}

// The declared cost of a reduction launch (Note [Launch ledger]): `in_bytes` per reduced element
// (every element of every output: n_out * n_red of them) and `out_bytes` per output position
// read and written, one `flops` per reduced element.
cuda::Cost reduce_cost(const Indexer& ix, double in_read, double out_read, double in_written, double out_written,
                       double flops = 1) {
  const double n = static_cast<double>(ix.n_out) * static_cast<double>(ix.n_red), o = static_cast<double>(ix.n_out);
  return cuda::cost(n * in_read + o * out_read, n * in_written + o * out_written, n * flops);
}

template <typename T>
void launch_extremum(Extremum kind, const Indexer& ix, Operand in, Operand values, Operand indices, const char* op) {
  with_group(group_size(ix, in), [&]<int G>() {
    const unsigned grid = detail::grid_for_groups<G>(ix.n_out);
    const cudaStream_t stream = cuda::current_stream();
    const double out_bytes = (values.data ? sizeof(T) : 0) + (indices.data ? sizeof(int64_t) : 0);
    if (kind == Extremum::Max)
      EMBER_LAUNCH((extremum_kernel<G, T, Extremum::Max>), grid, kThreads, 0, stream,
                   reduce_cost(ix, sizeof(T), 0, 0, out_bytes), ix, in, values, indices);
    else
      EMBER_LAUNCH((extremum_kernel<G, T, Extremum::Min>), grid, kThreads, 0, stream,
                   reduce_cost(ix, sizeof(T), 0, 0, out_bytes), ix, in, values, indices);
  });
  cuda::check_launch(op);
}

// Counts the elements equal to the output's value (NaN matches NaN), then writes each its share.
template <int G, typename T>
__global__ void extremum_backward_kernel(Indexer ix, Operand grad_in, Operand x, Operand value, Operand grad_out) {
  EMBER_GROUP_LOOP(G, ix.n_out, o, lane) {
    const T v = static_cast<const T*>(value.data)[ix.base(o, value.strides)];
    const T* xo = static_cast<const T*>(x.data) + ix.base(o, x.strides);
    T* gio = static_cast<T*>(grad_in.data) + ix.base(o, grad_in.strides);
    auto matches = [v](T e) { return e == v || (is_nan(e) && is_nan(v)); };
    int64_t count = 0;
    for (int64_t j = lane; j < ix.n_red; j += G) count += matches(xo[ix.offset(j, x.strides)]) ? 1 : 0;
    count = group_sum<G>(count);
    const acc_t<T> g = static_cast<acc_t<T>>(static_cast<const T*>(grad_out.data)[ix.base(o, grad_out.strides)]);
    const T share = count > 0 ? static_cast<T>(g / static_cast<acc_t<T>>(count)) : T(0);
    for (int64_t j = lane; j < ix.n_red; j += G)
      gio[ix.offset(j, grad_in.strides)] = matches(xo[ix.offset(j, x.strides)]) ? share : T(0);
  }
}

// No reduction: each group scatters grad_out[o] to the chosen position and zeros elsewhere.
template <int G, typename T>
__global__ void index_backward_kernel(Indexer ix, Operand grad_in, Operand grad_out, Operand indices) {
  EMBER_GROUP_LOOP(G, ix.n_out, o, lane) {
    const int64_t chosen = static_cast<const int64_t*>(indices.data)[ix.base(o, indices.strides)];
    const T g = static_cast<const T*>(grad_out.data)[ix.base(o, grad_out.strides)];
    T* gio = static_cast<T*>(grad_in.data) + ix.base(o, grad_in.strides);
    for (int64_t j = lane; j < ix.n_red; j += G) gio[ix.offset(j, grad_in.strides)] = j == chosen ? g : T(0);
  }
}

}  // namespace

// ---- entry points --------------------------------------------------------------------------------

void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "sum", [&] {
    using T = scalar_t;
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    if (ix.n_out == 0) return;
    const int group = group_size(ix, in);
    if (const int64_t splits = sum_splits(ix, group); splits > 1) {
      using A = acc_t<T>;
      cuda::Scratch partial(static_cast<size_t>(ix.n_out * splits) * sizeof(A));
      const int64_t slice = (ix.n_red + splits - 1) / splits;
      const dim3 grid(static_cast<unsigned>(ix.n_out), static_cast<unsigned>(splits));
      EMBER_LAUNCH((sum_partial_kernel<T>), grid, kThreads, 0, cuda::current_stream(),
                   reduce_cost(ix, sizeof(T), 0, 0, double(splits) * sizeof(A)), ix, in, slice, partial.as<A>());
      cuda::check_launch("sum");
      EMBER_LAUNCH((sum_finalize_kernel<T>), detail::grid_for(ix.n_out, kThreads), kThreads, 0, cuda::current_stream(),
                   cuda::cost(double(ix.n_out) * splits * sizeof(A), double(ix.n_out) * sizeof(T), double(ix.n_out) * splits),
                   ix, splits, partial.as<A>(), out);
      cuda::check_launch("sum");
      return;
    }
    with_group(group, [&]<int G>() {
      EMBER_LAUNCH((sum_kernel<G, T>), detail::grid_for_groups<G>(ix.n_out), kThreads, 0, cuda::current_stream(),
                   reduce_cost(ix, sizeof(T), 0, 0, sizeof(T)), ix, in, out);
    });
    cuda::check_launch("sum");
  });
}

void var(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape,
         int64_t correction) {
  EMBER_DISPATCH_FLOATING(dtype, "var", [&] {
    using T = scalar_t;
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    if (ix.n_out == 0) return;
    const auto divisor = static_cast<acc_t<T>>(ix.n_red - correction > 0 ? ix.n_red - correction : 0);
    with_group(group_size(ix, in), [&]<int G>() {
      EMBER_LAUNCH((var_kernel<G, T>), detail::grid_for_groups<G>(ix.n_out), kThreads, 0, cuda::current_stream(),
                   reduce_cost(ix, sizeof(T), 0, 0, sizeof(T), 4), ix, in, out, divisor);
    });
    cuda::check_launch("var");
  });
}

void extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand out,
              const IterShape& out_shape) {
  const char* op = kind == Extremum::Max ? "amax" : "amin";
  EMBER_DISPATCH_ORDERED(dtype, op, [&] {
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    EMBER_CHECK(ix.n_red > 0 || ix.n_out == 0, "extremum: empty reduction");
    if (ix.n_out == 0) return;
    launch_extremum<scalar_t>(kind, ix, in, out, Operand{}, op);
  });
}

void extremum_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand x, Operand value,
                       Operand grad_out, const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "amax backward", [&] {
    using T = scalar_t;
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    if (ix.n_out == 0) return;
    with_group(group_size(ix, x), [&]<int G>() {
      EMBER_LAUNCH((extremum_backward_kernel<G, T>), detail::grid_for_groups<G>(ix.n_out), kThreads, 0,
                   cuda::current_stream(), reduce_cost(ix, sizeof(T), 2 * sizeof(T), sizeof(T), 0, 2), ix, grad_in, x,
                   value, grad_out);
    });
    cuda::check_launch("amax backward");
  });
}

void arg_extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand values,
                  Operand indices, const IterShape& out_shape) {
  const char* op = kind == Extremum::Max ? "argmax" : "argmin";
  EMBER_DISPATCH_ORDERED(dtype, op, [&] {
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    EMBER_CHECK(ix.n_red > 0 || ix.n_out == 0, "arg_extremum: empty reduction");
    if (ix.n_out == 0) return;
    launch_extremum<scalar_t>(kind, ix, in, values, indices, op);
  });
}

void index_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand grad_out, Operand indices,
                    const IterShape& out_shape) {
  EMBER_DISPATCH_FLOATING(dtype, "max backward", [&] {
    using T = scalar_t;
    const Indexer ix(ReduceIndexer(in_shape, out_shape));
    if (ix.n_out == 0) return;
    with_group(group_size(ix, grad_in), [&]<int G>() {
      // No barrier and no shuffle: the emulator may run it as plain loops.
      EMBER_LAUNCH_FLAT((index_backward_kernel<G, T>), detail::grid_for_groups<G>(ix.n_out), kThreads,
                        cuda::current_stream(), reduce_cost(ix, 0, sizeof(T) + sizeof(int64_t), sizeof(T), 0, 0), ix,
                        grad_in, grad_out, indices);
    });
    cuda::check_launch("max backward");
  });
}

}  // namespace ember::kernels::gpu
