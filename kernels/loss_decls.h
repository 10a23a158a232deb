// The classification losses of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/loss.h.
// Read only inside a backend's namespace, by kernels/cpu/loss.h and kernels/cuda/loss.h.

int64_t find_invalid_target(const int64_t* target, int64_t count, int64_t num_classes, int64_t ignore_index);
void cross_entropy_forward(DType dtype, const ClassLayout& layout, const void* logits, const int64_t* target,
                           const void* weight, int64_t ignore_index, double label_smoothing, double* loss,
                           double* target_weight, double* lse);
void cross_entropy_backward(DType dtype, const ClassLayout& layout, void* grad_logits, const void* logits,
                            const int64_t* target, const void* weight, int64_t ignore_index, double label_smoothing,
                            const double* lse, const void* grad_loss, int64_t grad_stride, double grad_factor);
void nll_loss_forward(DType dtype, const ClassLayout& layout, const void* log_probs, const int64_t* target,
                      const void* weight, int64_t ignore_index, double* loss, double* target_weight);
void nll_loss_backward(DType dtype, const ClassLayout& layout, void* grad_input, const int64_t* target,
                       const void* weight, int64_t ignore_index, const void* grad_loss, int64_t grad_stride,
                       double grad_factor);
