#pragma once
// CPU optimizer steps: one fused pass over the elements of one parameter. Contracts and math:
// kernels/optim.h (Note [Matching torch.optim bit for bit]). grad_norm sums fixed blocks
// of 4096 elements that are then added in order, so its result does not depend on the thread count.

#include <cstdint>

#include "../../core/dtype.h"
#include "../optim.h"

namespace ember::kernels::cpu {

void adam_step(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, const AdamHyper& h);
void sgd_step(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer, bool init_buffer,
              const SgdHyper& h);
void grad_norm(DType dtype, int64_t n, const void* grad, double p, double* norm);
void clip_coefficient(const double* norms, int64_t count, double p, DType norm_dtype, double max_norm,
                      double* total_and_coef);
void scale_grads(DType dtype, const UnscaleTensor* tensors, int64_t count, const double* coef);
void non_finite_check_and_unscale(DType dtype, const UnscaleTensor* tensors, int64_t count, float* found_inf,
                                  const float* inv_scale);
void update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval);

}  // namespace ember::kernels::cpu
