#pragma once
// How the CPU convolutions spread a batch over threads (conv.cpp's im2col + GEMM and
// conv_winograd.cpp share it): images are split into `parts` fixed contiguous ranges. With at
// least as many images as threads: one part per thread, run in parallel, BLAS single-threaded
// inside. Otherwise one part, and each GEMM uses BLAS's threads. The ranges depend only on the
// batch and the thread count, so results are reproducible for a given thread count.

#include <cstdint>
#include <memory>

#include "gemm.h"
#include "../../core/cpu/parallel.h"
#include "scratch.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ember::kernels::cpu::conv_detail {

struct ImageSplit {
  int64_t parts = 1;
  bool parallel = false;
};

inline ImageSplit split_images(int64_t n) {
  const int threads = get_num_threads();
  bool nested = false;
#ifdef _OPENMP
  nested = omp_in_parallel();
#endif
  if (threads > 1 && n >= threads && !nested) return {threads, true};
  return {1, false};
}

// body(part, first_image, end_image) for every part.
template <typename F>
void run_parts(const ImageSplit& s, int64_t n, const F& body) {
  auto one = [&](int64_t p) { body(p, p * n / s.parts, (p + 1) * n / s.parts); };
  if (!s.parallel) {
    for (int64_t p = 0; p < s.parts; ++p) one(p);
    return;
  }
  BlasSingleThreadGuard blas_one_thread;
  parallel_for(0, s.parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) one(p);
  });
}

// Kernel scratch: Note [Kernel scratch from the CPU allocator] in scratch.h.
using cpu::scratch;
using cpu::Scratch;

}  // namespace ember::kernels::cpu::conv_detail
