#pragma once
// CPU optimizer steps: one fused pass over the elements of one parameter.
//
// Layout: every array holds n contiguous elements of `dtype` (float32 or float64), all of the
// same dtype. param and the state arrays are read and overwritten in place; grad is only read.
// No array may alias another. The per-element math is kernels/optim.h (shared with CUDA).

#include <cstdint>

#include "../../core/dtype.h"
#include "../optim.h"

namespace ember::kernels::cpu {

// Adam / AdamW (h.decay picks L2 or decoupled weight decay). max_exp_avg_sq is used, and must be
// non-null, only when h.amsgrad.
void adam_step(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, const AdamHyper& h);

// SGD. momentum_buffer is used, and must be non-null, only when h.momentum != 0; with
// init_buffer it is written (buf = d_p, torch's first step) instead of read.
void sgd_step(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer, bool init_buffer,
              const SgdHyper& h);

// The pieces of a gradient norm, accumulated in double over fixed blocks of 4096 elements that
// are then summed in order, so the result does not depend on the thread count:
//   finite p: sum |g|^p   (p == 2 uses g * g)
//   p = inf:  max |g|     (NaN if any element is NaN)
double grad_norm_partial(DType dtype, int64_t n, const void* grad, double p);

}  // namespace ember::kernels::cpu
