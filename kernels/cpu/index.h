#pragma once
// CPU indexing kernels. Contracts: kernels/index.h (Note [Index kernels]).

#include <cstdint>

#include "../../core/dtype.h"
#include "../index.h"
#include "../strided.h"

namespace ember::kernels::cpu {

void gather(DType dtype, const IterShape& shape, int dim, Operand out, Operand x, DType index_dtype, Operand index);
void scatter_add(DType dtype, const IterShape& shape, int dim, Operand out, Operand src, DType index_dtype,
                 Operand index);
bool indices_in_range(DType index_dtype, const IterShape& shape, Operand index, int64_t size, int64_t* bad);
void one_hot(DType out_dtype, DType label_dtype, int64_t n, const void* labels, int64_t num_classes, void* out);

}  // namespace ember::kernels::cpu
