// The softmax kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/softmax.h.
// Read only inside a backend's namespace, by kernels/cpu/softmax.h and kernels/cuda/softmax.h.

void softmax_forward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, const void* x, void* y);
void softmax_backward(SoftmaxKind kind, DType dtype, int64_t outer, int64_t n, int64_t inner, void* grad_x,
                      const void* grad_y, const void* y);
