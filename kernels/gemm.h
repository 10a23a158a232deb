#pragma once
// Matrix multiply: the row-major contract both backends implement (kernels/cpu/gemm.h: OpenBLAS
// and a reference; kernels/cuda/gemm.h: cuBLAS and a tiled kernel).
//
// Conventions, as row-major BLAS:
//   C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C
//   ta == Transpose::No:  A is stored as an (m, k) matrix, element (i, p) at a[i * lda + p], lda >= max(1, k)
//   ta == Transpose::Yes: A is stored as a (k, m) matrix, element (i, p) of op(A) at a[p * lda + i], lda >= max(1, m)
//   likewise for B with (k, n) / (n, k) and ldb; C: element (i, j) at c[i * ldc + j], ldc >= max(1, n).
//   beta == 0 overwrites C (whatever it held, NaN included); otherwise C is read and scaled.
//   C must not overlap A or B. k == 0 gives C = beta * C.
//   Dimensions must fit BLAS's 32-bit int (checked: ember::Error otherwise).
//   gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)          f32 and f64 overloads
//   gemm_batched(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch)
//       `batch` independent products with the same shapes and layouts: C[i] = alpha op(A[i]) op(B[i])
//       + beta C[i]. a, b, c are host arrays of `batch` pointers; a[i] and b[i] may repeat (a
//       broadcast operand); the c[i] must be distinct and not overlap.
// Pointers a, b, c are host memory for kernels::cpu, device memory of the current device for
// kernels::gpu (queued on cuda::current_stream(), asynchronous).

namespace ember::kernels {

enum class Transpose { No, Yes };

}  // namespace ember::kernels
