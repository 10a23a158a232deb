// Matrix products (to be implemented: mm, bmm, matmul, linear through OpenBLAS).

#include "linalg.h"

namespace ember {

Tensor matmul(const Tensor& a, const Tensor& b) { EMBER_THROW("matmul: not implemented yet"); }

}  // namespace ember
