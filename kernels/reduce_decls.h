// The reductions of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/reduce.h.
// Read only inside a backend's namespace, by kernels/cpu/reduce.h and kernels/cuda/reduce.h.

void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape);
void var(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape,
         int64_t correction);
void extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand out,
              const IterShape& out_shape);
void extremum_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand x, Operand value,
                       Operand grad_out, const IterShape& out_shape);
void arg_extremum(Extremum kind, DType dtype, const IterShape& in_shape, Operand in, Operand values,
                  Operand indices, const IterShape& out_shape);
void index_backward(DType dtype, const IterShape& in_shape, Operand grad_in, Operand grad_out, Operand indices,
                    const IterShape& out_shape);
