#pragma once
// CUDA random fills and dropout from Philox, bit-identical to the CPU for the same seed and
// offset (the layout is in kernels/random.h, whose per-element functions both sides call).
// Raw-pointer entry points on device memory, queued on cuda::current_stream(). The
// caller reserves the Philox blocks (Generator::take(philox_blocks_*(...))) and passes the first
// block as `offset`. No CUDA header.
//
// On a real GPU uniform, bernoulli, randint and dropout are bit-identical to the CPU (Note
// [No FMA contraction]); normal is within an ulp or two (CUDA's logf/cosf are not glibc's),
// and bit-identical under the SIMT emulator.

#include <cstdint>

#include "../../core/dtype.h"

namespace ember::kernels::gpu {

// Philox blocks a fill of n elements uses (the generator's offset advances by this much).
uint64_t philox_blocks_uniform(DType dtype, int64_t n);    // f32: ceil(n / 4); f64: ceil(n / 2)
uint64_t philox_blocks_normal(DType dtype, int64_t n);     // f32: ceil(n / 2); f64: n
uint64_t philox_blocks_bernoulli(int64_t n);               // ceil(n / 4) (also dropout, randint)

// out: n contiguous f32/f64 elements = lo + (hi - lo) * U[0, 1): what uniform_(t, lo, hi) writes.
void fill_uniform(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double lo, double hi);

// out: n contiguous f32/f64 elements = mean + std * N(0, 1) (Box-Muller): what normal_() writes.
void fill_normal(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double mean, double std);

// out: n contiguous elements of any dtype = 1 where the f32 uniform of element i is below
// float(p), else 0: what bernoulli(shape, p, {.dtype = dtype}) returns. p in [0, 1].
void fill_bernoulli(DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double p);

// out: n contiguous int64 = low + an integer in [0, high - low) (high - low <= 2^32): randint().
void fill_randint(int64_t n, int64_t* out, uint64_t seed, uint64_t offset, int64_t low, int64_t high);

// Dropout's forward as layers/dropout.cpp computes it, in one pass: with keep_i = (the f32
// uniform of element i) < float(1 - p) and scale = T(1 / (1 - p)),
//   mask[i] = keep_i ? scale : 0,   y[i] = x[i] * mask[i].
// x, y, mask: n contiguous f32/f64 (y may alias x; mask may be null when not needed). p in
// [0, 1): p == 1 draws nothing on the CPU and is the caller's (all zeros).
void dropout_forward(DType dtype, int64_t n, const void* x, void* y, void* mask, uint64_t seed, uint64_t offset,
                     double p);

}  // namespace ember::kernels::gpu
