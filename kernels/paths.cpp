#include "paths.h"

#include "cpu/bf16/gemm_bf16.h"
#include "cpu/blas.h"
#include "cpu/winograd/conv_winograd.h"

namespace ember::kernels {

CpuPaths cpu_paths() {
  const cpu::BlasInfo& blas = cpu::blas_info();
  CpuPaths p;
  p.blas_library = blas.library;
  p.gemm_kernels = blas.core;
  p.gemm_isa = blas.core_isa;
  p.gemm_chosen_by = blas.chosen_by;
  p.gemm_warning = blas.warning;
  p.bf16_gemm = cpu::bf16_gemm_path_name(cpu::bf16_gemm_path());
  p.conv3x3 = cpu::conv3x3_description();
  return p;
}

}  // namespace ember::kernels
