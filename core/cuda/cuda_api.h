#pragma once
// The CUDA runtime API (cudaMalloc, cudaStreamCreate, cudaEvent*, ...) for the translation units
// of core/cuda, one spelling for both flavours with a CUDA backend. Every core/cuda/*.cu file
// includes this header first.
//
// With nvcc (a GPU build) it is the real <cuda_runtime.h>. In the SIMT flavour the emulator is
// the device: kernels/simt/simt.h must come before any CUDA header (it defines the kernel
// keywords first), then declares the runtime API from the real headers, and the emulator
// (kernels/simt/*.cpp, compiled into libember) defines it over host memory. This is the one
// place core/ includes something from kernels/ (the layering table in docs/architecture.md).

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#elif defined(EMBER_SIMT)
#include <ember/kernels/simt/simt.h>
#else
#error "core/cuda needs nvcc (the CUDA flavour) or EMBER_SIMT (the SIMT emulator flavour)"
#endif
