#pragma once
// CPU reductions over strided operands.

#include "../../core/dtype.h"
#include "../strided.h"

namespace ember::kernels::cpu {

// out[j] = sum of in over the positions that map to j. `out` is an operand over the input's
// iteration shape with stride 0 along reduced dims; out_shape is the kept shape (reduced dims = 1).
// Accumulates in double for float32 inputs (pairwise-free but accurate for training sizes).
void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape);

}  // namespace ember::kernels::cpu
