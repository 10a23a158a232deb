// The elementwise kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/elementwise.h.
// Read only inside a backend's namespace, by kernels/cpu/elementwise.h and kernels/cuda/elementwise.h.

void unary(UnaryOp op, DType dtype, const IterShape& shape, Operand out, Operand in, double alpha);
void unary_backward(UnaryOp op, DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand x,
                    Operand y, double alpha);
void binary(BinaryOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b, double alpha);
void pow_backward(DType dtype, const IterShape& shape, Operand grad_a, Operand grad_b, Operand g, Operand a, Operand b,
                  Operand y);
void compare(CompareOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b);
void where(DType dtype, const IterShape& shape, Operand out, Operand cond, Operand a, Operand b);
void clamp(DType dtype, const IterShape& shape, Operand out, Operand in, bool has_lo, double lo, bool has_hi,
           double hi);
void copy(const IterShape& shape, DType out_dtype, Operand out, DType in_dtype, Operand in);
void fill(DType dtype, const IterShape& shape, Operand out, double value);
void logical_not(const IterShape& shape, Operand out, Operand in);
void isnan(DType dtype, const IterShape& shape, Operand out, Operand in);
