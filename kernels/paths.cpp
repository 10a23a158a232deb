#include "paths.h"

#include "cpu/bf16/amx_tiles.h"
#include "cpu/bf16/gemm_bf16.h"
#include "cpu/measured_choice.h"
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
  p.bf16_gemm = cpu::bf16_gemm_description();
  p.amx = cpu::amx_description();
  p.conv3x3 = cpu::conv3x3_description();
  const std::string file = cpu::measured_choice_file();
  p.measured = "on each shape's first use, kept in " + (file.empty() ? std::string("this process only") : file) +
               " (EMBER_KERNEL_CHOICES); EMBER_CPU_BF16=amx|avx512_bf16|f32 and EMBER_CPU_CONV=winograd|im2col|direct "
               "force a path";
  return p;
}

}  // namespace ember::kernels
