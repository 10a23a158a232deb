// The batch-normalization kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/batchnorm.h.
// Read only inside a backend's namespace, by kernels/cpu/batchnorm.h and kernels/cuda/batchnorm.h.

void batch_norm_stats(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x,
                      const BatchNormStats& out);
void batch_norm_apply(DType dtype, DType param_dtype, const BatchNormShape& sh, const void* x, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* y,
                      const void* residual = nullptr);
void batch_norm_backward(DType dtype, DType param_dtype, const BatchNormShape& sh, bool training, const void* x,
                         const void* grad_y, const void* mean, const void* invstd, const void* weight, void* grad_x,
                         void* grad_weight, void* grad_bias, const void* y = nullptr,
                         const void* bias = nullptr, void* grad_y_masked = nullptr);
