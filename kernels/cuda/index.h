#pragma once
// CUDA indexing kernels: gather, scatter_add (index_select and its backward are the same
// kernels with a broadcast index), the index range check, and one_hot. The entry points and
// contracts of kernels/cpu/index.h on device pointers, queued on cuda::current_stream().
// No CUDA header.
//
// Note [Index kernels]
// As on the CPU, each kernel walks an iteration shape (the index's shape) with one
// distinguished dim `dim`: at position p the index value v = index[p] replaces coordinate p[dim]
// in the indexed operand (strided operands, strides in elements over the iteration shape).
// On the GPU every position is its own thread, so scatter_add's colliding positions (those
// that differ only in p[dim]) meet in atomicAdd: float sums then depend on the order the
// atomics land in (not bit-reproducible run to run), integer sums do not.
// Indices must be in range: run indices_in_range first (the kernels do not check).

#include <cstdint>

#include "../../core/dtype.h"
#include "../strided.h"

namespace ember::kernels::gpu {

// out[p] = x[p with p[dim] := index[p]] for every position p of `shape`. Any dtype (elements
// are moved as raw bytes). index_dtype: int32 or int64.
void gather(DType dtype, const IterShape& shape, int dim, Operand out, Operand x, DType index_dtype, Operand index);

// out[p with p[dim] := index[p]] += src[p] for every position p of `shape` (accumulates into
// out). dtype: float32, float64, int32 or int64.
void scatter_add(DType dtype, const IterShape& shape, int dim, Operand out, Operand src, DType index_dtype,
                 Operand index);

// True when every index over `shape` lies in [0, size); otherwise false, with an offending value
// (the first in row-major order) in *bad. Returns a host value: waits for the current stream.
bool indices_in_range(DType index_dtype, const IterShape& shape, Operand index, int64_t size, int64_t* bad);

// out: (n, num_classes) contiguous of out_dtype, overwritten: out[i, labels[i]] = 1, others 0.
// labels: n contiguous int32/int64 values, all in [0, num_classes).
void one_hot(DType out_dtype, DType label_dtype, int64_t n, const void* labels, int64_t num_classes, void* out);

}  // namespace ember::kernels::gpu
