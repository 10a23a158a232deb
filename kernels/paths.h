#pragma once
// What runs here: which CPU kernels ember's ops run on this machine, and who chose them. One
// function serves `ember info`, the run report's environment (metrics.jsonl, report.html) and
// every benchmark's record, so that the three always say the same thing.

#include <string>

#include "../core/cpu/cpu_features.h"

namespace ember::kernels {

struct CpuPaths {
  std::string blas_library;    // what OpenBLAS says of itself: "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  std::string gemm_kernels;    // the BLAS kernels the f32 GEMMs and convolutions run: "SkylakeX"
  IsaLevel gemm_isa = IsaLevel::sse2;  // the instruction set of those kernels
  std::string gemm_chosen_by;  // "OpenBLAS", "OPENBLAS_CORETYPE=...", "ember, from the CPU's features (...)"
  std::string gemm_warning;    // non-empty when the kernels use less than the CPU has
  std::string bf16_gemm;       // the bf16 products' path (Note [bf16 GEMM on the CPU]): measured, or forced
  std::string amx;             // the AMX tiles: hardware, emulated or off, and why (Note [AMX tiles and their emulator])
  std::string conv3x3;         // the 3x3 convolutions' path (Winograd or im2col, and its cases)
  std::string measured;        // how measured paths are chosen and kept (Note [Kernels chosen by measurement])
};

// The paths as they are now (a benchmark may switch the bf16 path between calls).
CpuPaths cpu_paths();

}  // namespace ember::kernels
