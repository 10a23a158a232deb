// The pooling kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/pool.h.
// Read only inside a backend's namespace, by kernels/cpu/pool.h and kernels/cuda/pool.h.

void max_pool2d_forward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* x, void* out,
                        void* indices);
void max_pool2d_backward(DType dtype, DType index_dtype, const Pool2dGeometry& g, const void* grad_out,
                         const void* indices, void* grad_in);
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* x, void* out);
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in);
void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* x, void* out);
void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in);
