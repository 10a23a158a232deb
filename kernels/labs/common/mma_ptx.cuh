// Two tensor-core PTX instructions as small device functions, for the kernel labs: CUDA C++ has
// no intrinsic for them (CUTLASS and every fast GEMM wrap them the same way, in inline assembly).
//
//   ldmatrix_x4(r, row)        ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices of
//                              16-bit values from shared memory into the warp's registers; lane l
//                              gives the address of row l % 8 of matrix l / 8, and its register j
//                              receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of matrix j
//   ldmatrix_x4_trans(r, row)  the same with .trans: register j holds the transposed matrix's
//   mma_m16n8k16_bf16(d, a, b, c)
//                              mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a b + c
//                              for a 16x16 bf16 tile of A, a 16x8 tile of B and 16x8 floats, each
//                              lane holding 4 / 2 / 4 registers of them (the layouts are in
//                              kernels/simt/warp_matrix.h, as the PTX ISA gives them)
//
// On a GPU (nvcc, __CUDA_ARCH__ set) they are the instructions themselves; on ember's emulator
// they are its implementations of the same instructions (kernels/simt/warp_matrix.h).

#pragma once

#include <cstdint>

#if defined(EMBER_SIMT)

#include <ember/kernels/simt/warp_matrix.h>
using ember::simt::ptx::ldmatrix_x4;
using ember::simt::ptx::ldmatrix_x4_trans;
using ember::simt::ptx::mma_m16n8k16_bf16;

#else

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__)
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__)
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#endif
}

#endif
