// CPU reductions.
//
// The reference strategy: iterate over output positions (in parallel), and for each one walk the
// reduced sub-space of the input with an odometer. Accumulation is in double, so float32 sums of
// millions of elements stay accurate.

#include "reduce.h"

#include "../../core/error.h"
#include "parallel.h"

namespace ember::kernels::cpu {

void sum(DType dtype, const IterShape& in_shape, Operand in, Operand out, const IterShape& out_shape) {
  EMBER_DISPATCH_FLOAT(dtype, "sum", [&] {
    using T = scalar_t;
    const int nd = in_shape.ndim;
    // Split dims into kept (out_shape[d] == in_shape[d]) and reduced (out_shape[d] == 1 < in).
    int kept[kMaxDims], red[kMaxDims];
    int nk = 0, nr = 0;
    for (int d = 0; d < nd; ++d) {
      if (out_shape.sizes[d] == in_shape.sizes[d]) kept[nk++] = d;
      else red[nr++] = d;
    }
    int64_t n_out = 1, n_red = 1;
    for (int i = 0; i < nk; ++i) n_out *= in_shape.sizes[kept[i]];
    for (int i = 0; i < nr; ++i) n_red *= in_shape.sizes[red[i]];
    // Output strides over the kept shape are contiguous (out is freshly allocated, row-major).
    const T* src = static_cast<const T*>(in.data);
    T* dst = static_cast<T*>(out.data);
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n_red, 1));
    parallel_for(0, n_out, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        // Input offset of output position o, and output offset.
        int64_t rem = o, base = 0, out_off = 0;
        for (int i = nk - 1; i >= 0; --i) {
          const int d = kept[i];
          const int64_t idx = rem % in_shape.sizes[d];
          rem /= in_shape.sizes[d];
          base += idx * in.strides[d];
          out_off += idx * out.strides[d];
        }
        double acc = 0;
        if (nr == 1) {
          const int64_t st = in.strides[red[0]];
          for (int64_t j = 0; j < n_red; ++j) acc += static_cast<double>(src[base + j * st]);
        } else {
          for (int64_t j = 0; j < n_red; ++j) {
            int64_t r = j, off = base;
            for (int i = nr - 1; i >= 0; --i) {
              const int d = red[i];
              off += (r % in_shape.sizes[d]) * in.strides[d];
              r /= in_shape.sizes[d];
            }
            acc += static_cast<double>(src[off]);
          }
        }
        dst[out_off] = static_cast<T>(acc);
      }
    });
  });
}

}  // namespace ember::kernels::cpu
