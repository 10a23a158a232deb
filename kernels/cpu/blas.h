#pragma once
// Which BLAS kernels ember's CPU GEMMs (and so its convolutions) run, chosen from the CPU's
// features (Note [BLAS kernels by CPU features] in blas.cpp).

#include <string>

#include "../../core/cpu/cpu_features.h"

namespace ember::kernels::cpu {

struct BlasInfo {
  std::string library;  // what OpenBLAS says of itself: "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."
  std::string core;     // the kernels it runs: "SkylakeX", "Haswell", "Prescott", ...
  IsaLevel core_isa = IsaLevel::sse2;  // the instruction set those kernels use
  bool switchable = false;             // a DYNAMIC_ARCH build: ember can choose its kernels
  // Who chose the kernels: "OpenBLAS" (its own choice), "OPENBLAS_CORETYPE=...", or
  // "ember, from the CPU's features (OpenBLAS had chosen Prescott)".
  std::string chosen_by;
  // Non-empty when the kernels use less than the CPU has: the one-line warning ember prints.
  std::string warning;
};

// Makes sure OpenBLAS runs kernels for the widest instruction set the CPU has, once per process,
// and says which it runs. Every GEMM entry point calls it before its first BLAS call.
const BlasInfo& blas_info();

// Switches OpenBLAS to the kernels named `core` (a name OPENBLAS_CORETYPE accepts: "SkylakeX",
// "Haswell", "Sandybridge", "Prescott", ...). Returns false, changing nothing, when this OpenBLAS
// cannot switch or does not know the name. For tests that exercise every kernel path this CPU can
// run; not thread-safe with GEMMs in flight.
bool set_blas_core(const std::string& core);

// Makes the choice again, as at the first GEMM, from OpenBLAS's current kernels: after
// set_blas_core("Prescott") this is what happens on a CPU that OpenBLAS's model table does not
// know. Returns the new state (also what blas_info() returns from now on).
const BlasInfo& choose_blas_kernels_again();

// The instruction set of an OpenBLAS core name (case-insensitive; unknown names: SSE2).
IsaLevel blas_core_isa(const std::string& core);

}  // namespace ember::kernels::cpu
