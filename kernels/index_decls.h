// The indexing kernels of both backends, declared once for kernels::cpu and kernels::gpu
// (Note [Shared kernel declarations] in kernels/same_signatures.cpp). Contracts: kernels/index.h.
// Read only inside a backend's namespace, by kernels/cpu/index.h and kernels/cuda/index.h.

void gather(DType dtype, const IterShape& shape, int dim, Operand out, Operand x, DType index_dtype, Operand index);
void scatter_add(DType dtype, const IterShape& shape, int dim, Operand out, Operand src, DType index_dtype,
                 Operand index);
bool indices_in_range(DType index_dtype, const IterShape& shape, Operand index, int64_t size, int64_t* bad);
void one_hot(DType out_dtype, DType label_dtype, int64_t n, const void* labels, int64_t num_classes, void* out);
