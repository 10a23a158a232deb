#pragma once
// The GEMM problems of the CUDA GEMM tests (tests/cuda/test_gemm.cpp for f32/f64,
// test_gemm_low_precision.cpp for f16/bf16): the cases, random operands with padded leading
// dimensions, the two paths (cuBLAS or the tiled kernel), and the operands of a batched product.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "../../kernels/cuda/gemm.h"
#include "device_buffer.h"
#include "random_data.h"

namespace ember::testing {

struct GemmCase {
  int64_t m, n, k;
  kernels::Transpose ta, tb;
  int64_t pad;  // extra elements per stored row (lda = stored columns + pad, likewise ldb, ldc)
};

// Shapes from 1x1x1 up, ragged ones and a long k, each with all four transposes and pads 0, 1, 2
// in turn; `last` is one more (m, n, k) of the test's own.
inline std::vector<GemmCase> gemm_cases(std::array<int64_t, 3> last) {
  using kernels::Transpose;
  const std::array<int64_t, 3> shapes[] = {{1, 1, 1}, {31, 33, 17}, {64, 64, 16}, {65, 1, 130}, {3, 70, 1025}, last};
  std::vector<GemmCase> v;
  int64_t i = 0;
  for (const auto& s : shapes)
    for (Transpose ta : {Transpose::No, Transpose::Yes})
      for (Transpose tb : {Transpose::No, Transpose::Yes}) v.push_back({s[0], s[1], s[2], ta, tb, i++ % 3});
  return v;
}

// The host operands of one case: A, B and C random in [-1, 1] (seeds seed, seed + 1, seed + 2),
// stored with the case's padded leading dimensions (at least one element each).
template <typename T>
struct GemmProblem {
  GemmCase cs;
  int64_t lda, ldb, ldc;
  std::vector<T> a, b, c;
  GemmProblem(const GemmCase& c_, uint64_t seed) : cs(c_) {
    using kernels::Transpose;
    const int64_t a_rows = cs.ta == Transpose::No ? cs.m : cs.k, a_cols = cs.ta == Transpose::No ? cs.k : cs.m;
    const int64_t b_rows = cs.tb == Transpose::No ? cs.k : cs.n, b_cols = cs.tb == Transpose::No ? cs.n : cs.k;
    lda = std::max<int64_t>(1, a_cols + cs.pad);
    ldb = std::max<int64_t>(1, b_cols + cs.pad);
    ldc = std::max<int64_t>(1, cs.n + cs.pad);
    a = random_vector<T>(static_cast<size_t>(std::max<int64_t>(1, a_rows * lda)), seed);
    b = random_vector<T>(static_cast<size_t>(std::max<int64_t>(1, b_rows * ldb)), seed + 1);
    c = random_vector<T>(static_cast<size_t>(std::max<int64_t>(1, cs.m * ldc)), seed + 2);
  }
};

enum class GemmPath { Gemm, Tiled };

// C = alpha op(A) op(B) + beta C for problem p on the device copies da, db, dc, through
// kernels::gpu::gemm or gemm_tiled. S: the scalars' type (T, or float for f16/bf16).
template <typename T, typename S>
void run_gemm(GemmPath path, const GemmProblem<T>& p, S alpha, const DeviceBuffer<T>& da, const DeviceBuffer<T>& db,
              S beta, DeviceBuffer<T>& dc) {
  const GemmCase& cs = p.cs;
  if (path == GemmPath::Gemm)
    kernels::gpu::gemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, da.data(), p.lda, db.data(), p.ldb, beta, dc.data(),
                       p.ldc);
  else
    kernels::gpu::gemm_tiled(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, da.data(), p.lda, db.data(), p.ldb, beta,
                             dc.data(), p.ldc);
}

// The operands of a batched product: one A shared by every product (a broadcast operand), a B and
// a C per product, each kind in a single device allocation, and the pointer tables gemm_batched
// takes. A (m, k) or (k, m), B (k, n) and C (m, n) random in [-1, 1] (seeds 11, 12, 13).
template <typename T>
struct BroadcastBatch {
  BroadcastBatch(int64_t m, int64_t n, int64_t k, int64_t batch)
      : a(random_vector<T>(static_cast<size_t>(m * k), 11)),
        b(random_vector<T>(static_cast<size_t>(batch * k * n), 12)),
        c(random_vector<T>(static_cast<size_t>(batch * m * n), 13)),
        da(a),
        db(b),
        dc(c),
        ap(static_cast<size_t>(batch), da.data()),
        bp(static_cast<size_t>(batch)),
        cp(static_cast<size_t>(batch)) {
    for (int64_t i = 0; i < batch; ++i) {
      bp[static_cast<size_t>(i)] = db.data() + i * k * n;
      cp[static_cast<size_t>(i)] = dc.data() + i * m * n;
    }
  }

  std::vector<T> a, b, c;        // the host values
  DeviceBuffer<T> da, db, dc;    // on the device
  std::vector<const T*> ap, bp;  // product i reads ap[i] (always da) and bp[i]
  std::vector<T*> cp;            // and writes cp[i]
};

}  // namespace ember::testing
