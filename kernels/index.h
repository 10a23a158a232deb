#pragma once
// Indexing kernels: the contract both backends implement (kernels/cpu/index.h,
// kernels/cuda/index.h) — gather, scatter_add (index_select and its backward are the same kernels
// with a broadcast index), the index range check, and one_hot.
//
// Note [Index kernels]
// Each kernel walks an iteration shape (the index's shape) with one distinguished dim `dim`:
// at position p the index value v = index[p] replaces coordinate p[dim] in the indexed operand.
// Operands are strided (Operand::strides in elements, over the iteration shape); the indexed
// operand's strides are its own, and for every d != dim the caller guarantees p[d] < its size.
// Indices must be in range: run indices_in_range first (the kernels do not check).
// On the CPU, threads split the coordinates other than `dim` and the positions along `dim` are
// walked in order by one thread: positions that scatter into the same element differ only in
// p[dim], so scatter_add needs no atomics and its sums do not depend on the thread count. On the
// GPU every position is its own thread, so scatter_add's colliding positions meet in atomicAdd:
// float sums then depend on the order the atomics land in (not bit-reproducible run to run),
// integer sums do not.
//
//   gather(dtype, shape, dim, out, x, index_dtype, index)
//       out[p] = x[p with p[dim] := index[p]] for every position p of `shape`. Any dtype (elements
//       are moved as raw bytes). index_dtype: int32 or int64.
//   scatter_add(dtype, shape, dim, out, src, index_dtype, index)
//       out[p with p[dim] := index[p]] += src[p] for every position p (accumulates into out).
//       dtype: float32, float64, int32 or int64.
//   indices_in_range(index_dtype, shape, index, size, bad)
//       true when every index over `shape` lies in [0, size); otherwise false, with an offending
//       value (the first in row-major order) in *bad. A host value: on the GPU it waits for the
//       current stream.
//   one_hot(out_dtype, label_dtype, n, labels, num_classes, out)
//       out: (n, num_classes) contiguous of out_dtype, overwritten: out[i, labels[i]] = 1, others
//       0. labels: n contiguous int32/int64 values, all in [0, num_classes).
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()).
