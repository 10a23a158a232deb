// The optimizer steps of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/optim.h.
// Read only inside a backend's namespace, by kernels/cpu/optim.h and kernels/cuda/optim.h.

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
