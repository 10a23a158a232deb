// The convolution kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/conv.h.
// Read only inside a backend's namespace, by kernels/cpu/conv.h and kernels/cuda/conv.h.

void im2col(const Conv2dGeometry& g, const float* x, float* col);
void im2col(const Conv2dGeometry& g, const double* x, double* col);
void col2im(const Conv2dGeometry& g, const float* col, float* x);
void col2im(const Conv2dGeometry& g, const double* col, double* x);

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y);
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* gy, const void* x, void* gw);
void conv2d_backward_bias(DType dtype, const Conv2dGeometry& g, const void* gy, void* gb);
