#pragma once
// CUDA reductions over strided operands: the entry points and contracts of kernels/cpu/reduce.h
// on device pointers, queued on cuda::current_stream() (asynchronous). No CUDA header.
//
// Convention shared by every kernel here: the input and the outputs are operands over the
// input's iteration shape `in_shape`; an output has stride 0 along the reduced dims. `out_shape`
// is the kept shape (reduced dims set to 1). Outputs are written (overwrite), never accumulated.
// Float32 inputs accumulate in double.

#include <cstdint>

#include "../../core/dtype.h"
#include "../cpu/reduce.h"  // Extremum
#include "../strided.h"

namespace ember::kernels::gpu {

// out[j] = sum of in over the positions that map to j (0 over an empty set).
void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape);

// out[j] = sum((x - mean)^2) / max(0, n - correction) over the n positions that map to j
// (two passes, in double). n == 0 gives NaN; a zero divisor gives inf (or NaN), as PyTorch.
void var(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape,
         int64_t correction);

using cpu::Extremum;  // Max, Min: the same type as the CPU kernels take

// out[j] = max (or min) over the positions that map to j; NaN if any of them is NaN.
// Requires a non-empty reduction (the caller throws). f32, f64, i32, i64, u8.
void extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand out,
              const IterShape& out_shape);

// The backward of extremum, splitting the gradient evenly between ties:
//   grad_in[i] = grad_out[j] / count_j where x[i] matches value[j], else 0,
// where "matches" is x == value, or both NaN (a NaN result sends its gradient to the NaNs), and
// count_j is the number of matches. grad_in, grad_out: float dtype; x, value: that dtype too.
void extremum_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand x, Operand value,
                       Operand grad_out, const IterShape& out_shape);

// indices[j] (int64) = position of the first max (or min) among the elements that map to j
// (the first NaN if there is one), counted row-major over the reduced dims: the index along
// the dim when one dim is reduced, the flat index when all are. values[j] = that element,
// skipped when values.data is null. Requires a non-empty reduction. f32, f64, i32, i64, u8.
void arg_extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand values,
                  Operand indices, const IterShape& out_shape);

// The backward of arg_extremum's values: grad_in is zero except at the reduced position
// indices[j] (same numbering as arg_extremum) of each output j, where it is grad_out[j]. Float dtype.
void index_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand grad_out, Operand indices,
                    const IterShape& out_shape);

}  // namespace ember::kernels::gpu
