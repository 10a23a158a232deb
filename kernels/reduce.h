#pragma once
// Reductions over strided operands: the contract both backends implement (kernels/cpu/reduce.h,
// kernels/cuda/reduce.h), and the indexer both use.
//
// Convention shared by every kernel here: the input and the outputs are operands over the
// input's iteration shape `in_shape` (kernels/strided.h); an output has stride 0 along the
// reduced dims. `out_shape` is the kept shape (reduced dims set to 1). Outputs are written
// (overwrite), never accumulated. Sums accumulate in cpu_acc_t on the CPU (double for f32) and
// acc_t on CUDA (float for f32): Note [Accumulation types] in core/dtype.h.
//   sum(dtype, in_shape, in, out, out_shape)
//       out[j] = sum of in over the positions that map to j (0 over an empty set)
//   var(dtype, in_shape, in, out, out_shape, correction)
//       out[j] = sum((x - mean)^2) / max(0, n - correction) over the n positions that map to j
//       (two passes, in the accumulation type). n == 0 gives NaN; a zero divisor gives inf (or NaN), as PyTorch.
//   extremum(kind, dtype, in_shape, in, out, out_shape)
//       out[j] = max (or min) over the positions that map to j; NaN if any of them is NaN.
//       Requires a non-empty reduction (the caller throws). f32, f64, i32, i64, u8.
//   extremum_backward(dtype, in_shape, grad_in, x, value, grad_out, out_shape)
//       splits the gradient evenly between ties: grad_in[i] = grad_out[j] / count_j where x[i]
//       matches value[j], else 0 ("matches": x == value, or both NaN — a NaN result sends its
//       gradient to the NaNs; count_j: the number of matches). Float dtypes.
//   arg_extremum(kind, dtype, in_shape, in, values, indices, out_shape)
//       indices[j] (int64) = position of the first max (or min) among the elements that map to j
//       (the first NaN if there is one), counted row-major over the reduced dims: the index along
//       the dim when one dim is reduced, the flat index when all are. values[j] = that element,
//       skipped when values.data is null. Requires a non-empty reduction. f32, f64, i32, i64, u8.
//   index_backward(dtype, in_shape, grad_in, grad_out, indices, out_shape)
//       the backward of arg_extremum's values: grad_in is zero except at the reduced position
//       indices[j] (same numbering as arg_extremum) of each output j, where it is grad_out[j].
// Pointers are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream()).

#include <cstdint>

#include "strided.h"

namespace ember::kernels {

enum class Extremum { Max, Min };

// Splits an iteration shape into kept dims (out_shape[d] == in_shape[d]) and reduced dims
// (out_shape[d] == 1 < in_shape[d]), and maps "output position o" (row-major over the kept
// dims) and "reduced element j" (row-major over the reduced dims) to element offsets in an
// operand. Shared by the CPU reduction, softmax and loss kernels and the CUDA
// reductions (which copy it into a by-value struct the kernels take).
struct ReduceIndexer {
  IterShape shape;
  int kept[kMaxDims] = {}, red[kMaxDims] = {};
  int nk = 0, nr = 0;
  int64_t n_out = 1;  // number of output positions
  int64_t n_red = 1;  // number of elements reduced into each output

  ReduceIndexer(const IterShape& in_shape, const IterShape& out_shape) : shape(in_shape) {
    for (int d = 0; d < in_shape.ndim; ++d) {
      if (out_shape.sizes[d] == in_shape.sizes[d]) kept[nk++] = d;
      else red[nr++] = d;
    }
    for (int i = 0; i < nk; ++i) n_out *= shape.sizes[kept[i]];
    for (int i = 0; i < nr; ++i) n_red *= shape.sizes[red[i]];
  }
  // Offset in `op` of the first element that output position o reads (or writes).
  int64_t base(int64_t o, const Operand& op) const {
    int64_t off = 0;
    for (int i = nk - 1; i >= 0; --i) {
      const int d = kept[i];
      off += (o % shape.sizes[d]) * op.strides[d];
      o /= shape.sizes[d];
    }
    return off;
  }
  // Offset, relative to base(), of reduced element j.
  int64_t offset(int64_t j, const Operand& op) const {
    if (nr == 1) return j * op.strides[red[0]];  // the common case: one reduced dim
    int64_t off = 0;
    for (int i = nr - 1; i >= 0; --i) {
      const int d = red[i];
      off += (j % shape.sizes[d]) * op.strides[d];
      j /= shape.sizes[d];
    }
    return off;
  }
  // Output positions per parallel_for chunk: about 32K input elements per chunk.
  int64_t grain() const { return n_red > 0 ? (32768 + n_red - 1) / n_red : 32768; }
};

}  // namespace ember::kernels
