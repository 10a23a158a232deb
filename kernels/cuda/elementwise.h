#pragma once
// CUDA elementwise kernels over strided operands (see kernels/strided.h): the same entry points
// and contracts as kernels/cpu/elementwise.h, on device pointers. Work is queued on
// cuda::current_stream() and runs asynchronously. No CUDA header here.
// All operands share one iteration shape; broadcast operands have stride 0.
// Outputs must not partially overlap inputs (exact aliasing, out == in, is allowed).

#include "../../core/dtype.h"
#include "../elementwise.h"
#include "../strided.h"

namespace ember::kernels::gpu {

// out = op(in, alpha); float32/float64.
void unary(UnaryOp op, DType dtype, const IterShape& shape, Operand out, Operand in, double alpha);
// grad_in = op.bwd(grad_out, x, y, alpha); x or y may be unused by the op (pass any operand).
void unary_backward(UnaryOp op, DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand x,
                    Operand y, double alpha);
// out = a op b (Add/Sub compute a + alpha * b / a - alpha * b); float32/float64.
void binary(BinaryOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b, double alpha);
// Pow's partial derivatives: grad_a = da(g, a, b, y), grad_b = db(g, a, b, y); either output may be null.
void pow_backward(DType dtype, const IterShape& shape, Operand grad_a, Operand grad_b, Operand g, Operand a, Operand b,
                  Operand y);
// out (bool) = a op b; any dtype (both operands of `dtype`).
void compare(CompareOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b);
// out = cond ? a : b; cond bool, a/b/out of `dtype`.
void where(DType dtype, const IterShape& shape, Operand out, Operand cond, Operand a, Operand b);
// out = clamp(in, lo, hi) (has_lo/has_hi say which bounds apply); NaN stays NaN.
void clamp(DType dtype, const IterShape& shape, Operand out, Operand in, bool has_lo, double lo, bool has_hi,
           double hi);
// out = in converted from in_dtype to out_dtype (f16/bf16 round to nearest even; float to int truncates).
void copy(const IterShape& shape, DType out_dtype, Operand out, DType in_dtype, Operand in);
// out = value converted to dtype.
void fill(DType dtype, const IterShape& shape, Operand out, double value);
// out (bool) = !in (in: bool) or isnan(in) (in: any dtype).
void logical_not(const IterShape& shape, Operand out, Operand in);
void isnan(DType dtype, const IterShape& shape, Operand out, Operand in);

}  // namespace ember::kernels::gpu
