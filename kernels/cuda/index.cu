// CUDA indexing kernels (contracts and Note [Index kernels] in index.h; the CPU reference is
// kernels/cpu/index.cpp).
//
// Parallel decomposition: one thread per position p of the iteration shape (grid-stride), all
// flat launches (no shared memory, no barriers). The offset calculator (Note [Offset
// calculator]) walks the index's shape with the indexed operand's stride along `dim` set to 0,
// so it yields that operand's offset of (p with p[dim] := 0); the thread then adds
// index[p] * stride[dim]. Neighbouring threads are neighbouring positions: reads of the index
// and of the non-indexed operand are coalesced, the indexed side is a gather/scatter.

#include "launch.h"

#include "index.h"

#include <cstdint>

#include "../../core/error.h"
#include "common.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::grid_for;
using detail::kThreads;
using detail::StridedIndexer;

// Operands 0: the indexed one (stride along dim zeroed), 1: the other data operand, 2: index.
template <typename T, typename I>
__global__ void gather_kernel(int64_t n, StridedIndexer<3> ix, T* out, const T* x, int64_t x_dim_stride,
                              const I* index) {
  EMBER_THREAD_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[1]] = x[off[0] + static_cast<int64_t>(index[off[2]]) * x_dim_stride];
  }
}

// Atomic accumulation: the hardware's float/double/int adds; int64 adds as unsigned 64-bit
// (two's complement wraps the same way).
template <typename T>
__device__ void atomic_accumulate(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  else
    atomicAdd(p, v);
}

template <typename T, typename I>
__global__ void scatter_add_kernel(int64_t n, StridedIndexer<3> ix, T* out, int64_t out_dim_stride, const T* src,
                                   const I* index) {
  EMBER_THREAD_LOOP(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    atomic_accumulate(out + off[0] + static_cast<int64_t>(index[off[2]]) * out_dim_stride, src[off[1]]);
  }
}

// first = the smallest linear position holding an index outside [0, size).
template <typename I>
__global__ void find_out_of_range_kernel(int64_t n, StridedIndexer<1> ix, const I* index, int64_t size,
                                         unsigned long long* first) {
  EMBER_THREAD_LOOP(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    const auto v = static_cast<int64_t>(index[off[0]]);
    if (v < 0 || v >= size) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

template <typename T, typename I>
__global__ void one_hot_kernel(int64_t n, const I* labels, int64_t num_classes, T* out) {
  EMBER_THREAD_LOOP(i, n) out[i * num_classes + static_cast<int64_t>(labels[i])] = static_cast<T>(1.0f);
}

// What one element written into each row of `row_bytes` costs: a whole 32-byte sector (the unit
// DRAM moves) when rows are at least that long, else the row (neighbouring rows share sectors).
double scattered_bytes(size_t row_bytes) { return static_cast<double>(std::min<size_t>(32, row_bytes)); }

// The indexed operand as the offset calculator sees it: stride 0 along dim.
Operand without_dim(Operand op, int dim) {
  op.strides[dim] = 0;
  return op;
}

}  // namespace

void gather(DType dtype, const IterShape& shape, int dim, Operand out, Operand x, DType index_dtype, Operand index) {
  EMBER_DISPATCH_INDEX(index_dtype, "gather", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_BYTES(dtype, "gather", [&] {
      using T = scalar_t;
      const int64_t n = shape.numel();
      if (n == 0) return;
      const Operand ops[3] = {without_dim(x, dim), out, index};
      EMBER_LAUNCH_FLAT((gather_kernel<T, I>), grid_for(n, kThreads), kThreads, cuda::current_stream(),
                        cuda::cost(double(n) * (sizeof(T) + sizeof(I)), double(n) * sizeof(T)), n,
                        StridedIndexer<3>(shape, ops), static_cast<T*>(out.data), static_cast<const T*>(x.data),
                        x.strides[dim], static_cast<const I*>(index.data));
      cuda::check_launch("gather");
    });
  });
}

void scatter_add(DType dtype, const IterShape& shape, int dim, Operand out, Operand src, DType index_dtype,
                 Operand index) {
  EMBER_DISPATCH_INDEX(index_dtype, "scatter_add", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_ADDABLE(dtype, "scatter_add", [&] {
      using T = scalar_t;
      const int64_t n = shape.numel();
      if (n == 0) return;
      const Operand ops[3] = {without_dim(out, dim), src, index};
      EMBER_LAUNCH_FLAT((scatter_add_kernel<T, I>), grid_for(n, kThreads), kThreads, cuda::current_stream(),
                        cuda::cost(double(n) * (sizeof(T) + sizeof(I)), double(n) * sizeof(T), double(n)), n,
                        StridedIndexer<3>(shape, ops), static_cast<T*>(out.data), out.strides[dim],
                        static_cast<const T*>(src.data), static_cast<const I*>(index.data));
      cuda::check_launch("scatter_add");
    });
  });
}

bool indices_in_range(DType index_dtype, const IterShape& shape, Operand index, int64_t size, int64_t* bad) {
  const int64_t n = shape.numel();
  if (n == 0) return true;
  const cudaStream_t stream = cuda::current_stream();
  const StridedIndexer<1> ix(shape, &index);
  cuda::Scratch first(sizeof(unsigned long long));
  cuda::memset_async(first.get(), 0xFF, sizeof(unsigned long long), stream);  // "none yet"
  EMBER_DISPATCH_INDEX(index_dtype, "index", [&] {
    EMBER_LAUNCH_FLAT((find_out_of_range_kernel<scalar_t>), grid_for(n, kThreads), kThreads, stream,
                      cuda::cost(double(n) * sizeof(scalar_t), 0), n, ix, static_cast<const scalar_t*>(index.data), size,
                      first.as<unsigned long long>());
  });
  cuda::check_launch("index range check");
  // The answer is a host bool: copy the position back and wait for the stream; in the bad
  // case, fetch the offending value too.
  unsigned long long pos = 0;
  cuda::read_to_host(&pos, first.get(), sizeof(pos), stream, "index range check");
  if (pos == ~0ULL) return true;
  int64_t off[1];
  ix.offsets(static_cast<int64_t>(pos), off);
  EMBER_DISPATCH_INDEX(index_dtype, "index", [&] {
    scalar_t v{};
    cuda::read_to_host(&v, static_cast<const scalar_t*>(index.data) + off[0], sizeof(v), stream,
                       "index range check: the offending index");
    *bad = static_cast<int64_t>(v);
  });
  return false;
}

void one_hot(DType out_dtype, DType label_dtype, int64_t n, const void* labels, int64_t num_classes, void* out) {
  if (n == 0 || num_classes == 0) return;
  const cudaStream_t stream = cuda::current_stream();
  cuda::memset_async(out, 0, static_cast<size_t>(n * num_classes * dtype_size(out_dtype)), stream);
  EMBER_DISPATCH_INDEX(label_dtype, "one_hot", [&] {
    using I = scalar_t;
    EMBER_DISPATCH_ALL(out_dtype, "one_hot", [&] {
      using T = scalar_t;
      EMBER_LAUNCH_FLAT((one_hot_kernel<T, I>), grid_for(n, kThreads), kThreads, stream,
                        cuda::cost(double(n) * sizeof(I), double(n) * scattered_bytes(num_classes * sizeof(T))), n,
                        static_cast<const I*>(labels),
                        num_classes, static_cast<T*>(out));
    });
  });
  cuda::check_launch("one_hot");
}

}  // namespace ember::kernels::gpu
