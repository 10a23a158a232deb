// The bf16 GEMM's entry points (gemm_bf16.h): which kernel runs — the AMX tiles, VDPBF16PS or
// the f32 fallback, measured per shape by default (Note [Kernels chosen by measurement] in
// measured_choice.cpp) — and how a product is split over threads.

#include "gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../../../core/cpu/cpu_features.h"
#include "../../../core/cpu/parallel.h"
#include "../../../core/error.h"
#include "../gemm.h"
#include "../measured_choice.h"
#include "../scratch.h"
#include "bf16_convert.h"
#include "gemm_bf16_kernels.h"

namespace ember::kernels::cpu {

namespace {

bool native_available() {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16;
#else
  return false;
#endif
}

bool amx_available() { return amx_tiles() != AmxTiles::off; }

// The kernels this process can run, fastest first where they usually are. The emulated tiles are
// a test vehicle, never a candidate: they run only when forced (Bf16GemmPath::amx).
std::vector<Bf16GemmPath> measured_candidates() {
  std::vector<Bf16GemmPath> c;
  if (amx_tiles() == AmxTiles::hardware) c.push_back(Bf16GemmPath::amx);
  if (native_available()) c.push_back(Bf16GemmPath::avx512_bf16);
  c.push_back(Bf16GemmPath::f32_fallback);
  return c;
}

Bf16GemmPath default_path() {
  const char* env = std::getenv("EMBER_CPU_BF16");
  const std::string v = env ? env : "";
  if (v == "off" || v == "0" || v == "f32") return Bf16GemmPath::f32_fallback;
  if (v == "amx" && amx_available()) return Bf16GemmPath::amx;
  if (v == "avx512_bf16" && native_available()) return Bf16GemmPath::avx512_bf16;
  return measured_candidates().size() > 1 ? Bf16GemmPath::measured : Bf16GemmPath::f32_fallback;
}

std::atomic<int>& chosen_path() {
  static std::atomic<int> path{static_cast<int>(default_path())};
  return path;
}

std::atomic<int64_t> native_products{0}, amx_products{0};

bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return false;
#endif
}

void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

// A product into an f32 C on all of ember's threads: cut into blocks of C's columns (or rows,
// whichever is longer), whole units of the kernel's tile each, one block per thread, each with its
// own packing Buffers; on the calling thread alone below min_flop (threads cost more than they
// save) or inside a parallel region. block(i0, j0, rows, cols, c at (i0, j0), buffers).
template <class Buffers, class Block>
void threaded(int64_t m, int64_t n, int64_t k, float beta, float* c, int64_t ldc, int64_t unit_rows,
              int64_t unit_cols, double min_flop, const Block& block) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  const int threads = get_num_threads();
  const bool by_rows = m > n;
  const int64_t len = by_rows ? m : n, unit = by_rows ? unit_rows : unit_cols;
  if (threads <= 1 || in_parallel() || 2.0 * static_cast<double>(m) * static_cast<double>(n) * k < min_flop ||
      len < 2 * unit) {
    Buffers buf;
    return block(0, 0, m, n, c, buf);
  }
  const int64_t part = ((len + threads - 1) / threads + unit - 1) / unit * unit;
  const int64_t parts = (len + part - 1) / part;
  std::vector<Buffers> bufs(static_cast<size_t>(parts));
  parallel_for(0, parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = t * part, hi = std::min(len, lo + part);
      if (by_rows)
        block(lo, 0, hi - lo, n, c + lo * ldc, bufs[t]);
      else
        block(0, lo, m, hi - lo, c + lo, bufs[t]);
    }
  });
}

// Below these the threads cost more than they save (~2 MFLOP on VDPBF16PS; AMX does the same
// work in a fraction of the time).
constexpr double kDotThreadFlop = 2e6, kAmxThreadFlop = 8e6;

// op(X) (rows, cols) of a stored matrix, widened to contiguous f32 in its stored layout (16
// values at a time where the CPU has AVX-512: bf16_convert.h), in scratch memory.
Scratch<float> widen_matrix(Transpose t, int64_t rows, int64_t cols, const BFloat16* x, int64_t ld) {
  const int64_t sr = t == Transpose::No ? rows : cols, sc = t == Transpose::No ? cols : rows;
  Scratch<float> out = scratch<float>(sr * sc);
  for (int64_t i = 0; i < sr; ++i) bf16_to_f32(x + i * ld, out.get() + i * sc, sc);
  return out;
}

// The fallback: op(A), op(B) widened to f32, OpenBLAS sgemm (threaded by gemm.h) into an f32 C.
void fallback_f32(const Bf16Operands& o, int64_t m, int64_t n, int64_t k, float alpha, float beta, float* c,
                  int64_t ldc) {
  const Scratch<float> af = widen_matrix(o.ta, m, k, o.a, o.lda), bf = widen_matrix(o.tb, k, n, o.b, o.ldb);
  const int64_t lda32 = std::max<int64_t>(1, o.ta == Transpose::No ? k : m);
  const int64_t ldb32 = std::max<int64_t>(1, o.tb == Transpose::No ? n : k);
  gemm(o.ta, o.tb, m, n, k, alpha, af.get(), lda32, bf.get(), ldb32, beta, c, ldc);
}

// The product on one kernel (not measured), threaded where it pays. The avx512_bf16 kernel sends
// a product with fewer than half its tile's columns to the fallback: it would mostly multiply the
// packed zeros of the 8 x 48 tile (a 3x3 single-channel convolution's weight gradient has 9).
void run_path(Bf16GemmPath path, const Bf16Operands& o, int64_t m, int64_t n, int64_t k, float alpha, float beta,
              float* c, int64_t ldc) {
  if (path == Bf16GemmPath::amx) {
    ++amx_products;
    const AmxTiles tiles = amx_tiles();
    return threaded<AmxPackBuffers>(m, n, k, beta, c, ldc, kAmxTileRows, kAmxTileCols, kAmxThreadFlop,
                                    [&](int64_t i0, int64_t j0, int64_t mb, int64_t nb, float* cp, AmxPackBuffers& b) {
                                      amx_product(tiles, o, i0, j0, mb, nb, k, alpha, beta, cp, ldc, b);
                                    });
  }
  if (path == Bf16GemmPath::avx512_bf16 && n >= kDotTileCols / 2) {
    ++native_products;
    return threaded<DotPackBuffers>(m, n, k, beta, c, ldc, kDotTileRows, kDotTileCols, kDotThreadFlop,
                                    [&](int64_t i0, int64_t j0, int64_t mb, int64_t nb, float* cp, DotPackBuffers& b) {
                                      dot_block(o, i0, j0, mb, nb, k, alpha, beta, cp, ldc, b);
                                    });
  }
  fallback_f32(o, m, n, k, alpha, beta, c, ldc);
}

// One product on the calling thread (inside gemm_bf16_batched's parallel loop). k > 0.
struct ThreadBuffers {
  std::unique_ptr<DotPackBuffers> dot;
  std::unique_ptr<AmxPackBuffers> amx;
};
void run_serial(Bf16GemmPath path, const Bf16Operands& o, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                float* c, int64_t ldc, ThreadBuffers& buf) {
  if (path == Bf16GemmPath::amx) return amx_product(amx_tiles(), o, 0, 0, m, n, k, alpha, beta, c, ldc, *buf.amx);
  dot_block(o, 0, 0, m, n, k, alpha, beta, c, ldc, *buf.dot);
}

std::vector<std::string> names_of(const std::vector<Bf16GemmPath>& paths) {
  std::vector<std::string> names;
  for (Bf16GemmPath p : paths) names.push_back(p == Bf16GemmPath::f32_fallback ? "f32" : bf16_gemm_path_name(p));
  return names;
}

// "NT 64x2156x288, 2 threads": what decides which kernel wins.
std::string shape_key(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k) {
  const int threads = in_parallel() ? 1 : get_num_threads();
  return std::string(ta == Transpose::No ? "N" : "T") + (tb == Transpose::No ? "N" : "T") + " " + std::to_string(m) +
         "x" + std::to_string(n) + "x" + std::to_string(k) + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

// An f32 copy of C (m, n) for a bf16 C, in scratch memory: C's values when beta reads them, else
// uninitialized.
Scratch<float> f32_c(int64_t m, int64_t n, float beta, const BFloat16* c, int64_t ldc) {
  Scratch<float> out = scratch<float>(m * n);
  if (beta != 0.0f)
    for (int64_t i = 0; i < m; ++i) bf16_to_f32(c + i * ldc, out.get() + i * n, n);
  return out;
}

// C (m, n) = src rounded to bf16 once (BFloat16(float)'s bits, 16 at a time where the CPU can).
void round_c(int64_t m, int64_t n, const float* src, BFloat16* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) f32_to_bf16(src + i * n, c + i * ldc, n);
}

// gemm_bf16_batched on one kernel: one product per thread at a time where there are enough
// products, each product threaded by itself otherwise.
void batched_on(Bf16GemmPath path, const Bf16Operands& o0, int64_t m, int64_t n, int64_t k, float alpha,
                const BFloat16* const* a, const BFloat16* const* b, float beta, BFloat16* const* c, int64_t ldc,
                int64_t batch) {
  const int threads = get_num_threads();
  const bool one_each = path != Bf16GemmPath::f32_fallback && batch >= threads && threads > 1 && !in_parallel() &&
                        k > 0 && (path != Bf16GemmPath::avx512_bf16 || n >= kDotTileCols / 2);
  if (!one_each) {
    for (int64_t i = 0; i < batch; ++i) {
      const Scratch<float> cf = f32_c(m, n, beta, c[i], ldc);
      run_path(path, {o0.ta, o0.tb, a[i], o0.lda, b[i], o0.ldb}, m, n, k, alpha, beta, cf.get(), std::max<int64_t>(1, n));
      round_c(m, n, cf.get(), c[i], ldc);
    }
    return;
  }
  (path == Bf16GemmPath::amx ? amx_products : native_products) += batch;
  const int64_t parts = threads;
  std::vector<ThreadBuffers> bufs(static_cast<size_t>(parts));
  for (ThreadBuffers& tb : bufs) {
    if (path == Bf16GemmPath::amx) tb.amx = std::make_unique<AmxPackBuffers>();
    else tb.dot = std::make_unique<DotPackBuffers>();
  }
  const Scratch<float> cf_all = scratch<float>(parts * m * n);
  parallel_for(0, parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = t * batch / parts; i < (t + 1) * batch / parts; ++i) {
        float* cp = cf_all.get() + t * m * n;
        if (beta != 0.0f)
          for (int64_t r = 0; r < m; ++r) bf16_to_f32(c[i] + r * ldc, cp + r * n, n);
        run_serial(path, {o0.ta, o0.tb, a[i], o0.lda, b[i], o0.ldb}, m, n, k, alpha, beta, cp, n, bufs[t]);
        round_c(m, n, cp, c[i], ldc);
      }
  });
}

}  // namespace

Bf16GemmPath bf16_gemm_path() { return static_cast<Bf16GemmPath>(chosen_path().load(std::memory_order_relaxed)); }

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  switch (path) {
    case Bf16GemmPath::measured: return "measured per shape";
    case Bf16GemmPath::amx: return "amx";
    case Bf16GemmPath::avx512_bf16: return "avx512_bf16";
    case Bf16GemmPath::f32_fallback: return "f32 fallback (OpenBLAS sgemm)";
  }
  return "?";
}

std::string bf16_gemm_description() {
  const Bf16GemmPath path = bf16_gemm_path();
  std::string s = bf16_gemm_path_name(path);
  if (path == Bf16GemmPath::measured) {
    s += " among";
    const std::vector<std::string> names = names_of(measured_candidates());
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : " ") + names[i];
  }
  if (path == Bf16GemmPath::amx) s += std::string(" (") + amx_tiles_name(amx_tiles()) + " tiles)";
  return s;
}

bool bf16_gemm_native_available() { return native_available(); }
bool bf16_gemm_amx_available() { return amx_available(); }

bool set_bf16_gemm_path(Bf16GemmPath path) {
  if (path == Bf16GemmPath::avx512_bf16 && !native_available()) return false;
  if (path == Bf16GemmPath::amx && !amx_available()) return false;
  chosen_path().store(static_cast<int>(path));
  return true;
}

int64_t bf16_gemm_native_products() { return native_products.load(); }
int64_t bf16_gemm_amx_products() { return amx_products.load(); }

void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Bf16Operands o{ta, tb, a, lda, b, ldb};
  const Bf16GemmPath path = bf16_gemm_path();
  if (path != Bf16GemmPath::measured || m == 0 || n == 0 || k == 0)
    return run_path(path == Bf16GemmPath::measured ? Bf16GemmPath::f32_fallback : path, o, m, n, k, alpha, beta, c, ldc);
  const std::vector<Bf16GemmPath> paths = measured_candidates();
  std::vector<float> saved;  // C as the caller gave it, when the product reads it
  if (beta != 0.0f)
    for (int64_t i = 0; i < m; ++i) saved.insert(saved.end(), c + i * ldc, c + i * ldc + n);
  run_measured(
      "gemm_bf16", shape_key(ta, tb, m, n, k), names_of(paths),
      [&](int i) { run_path(paths[i], o, m, n, k, alpha, beta, c, ldc); },
      [&] {
        if (saved.empty()) return;
        for (int64_t i = 0; i < m; ++i) std::copy(saved.begin() + i * n, saved.begin() + (i + 1) * n, c + i * ldc);
      });
}

void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const Scratch<float> cf = f32_c(m, n, beta, c, ldc);
  gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cf.get(), std::max<int64_t>(1, n));
  round_c(m, n, cf.get(), c, ldc);
}

void gemm_bf16_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb, float beta,
                       BFloat16* const* c, int64_t ldc, int64_t batch) {
  if (batch <= 0 || m == 0 || n == 0) return;
  const Bf16Operands o0{ta, tb, nullptr, lda, nullptr, ldb};
  const Bf16GemmPath path = bf16_gemm_path();
  if (path != Bf16GemmPath::measured || k == 0)
    return batched_on(path == Bf16GemmPath::measured ? Bf16GemmPath::f32_fallback : path, o0, m, n, k, alpha, a, b,
                      beta, c, ldc, batch);
  const std::vector<Bf16GemmPath> paths = measured_candidates();
  std::vector<BFloat16> saved;
  if (beta != 0.0f)
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < m; ++r) saved.insert(saved.end(), c[i] + r * ldc, c[i] + r * ldc + n);
  run_measured(
      "gemm_bf16 batched", std::to_string(batch) + " x " + shape_key(ta, tb, m, n, k), names_of(paths),
      [&](int i) { batched_on(paths[i], o0, m, n, k, alpha, a, b, beta, c, ldc, batch); },
      [&] {
        if (saved.empty()) return;
        for (int64_t i = 0; i < batch; ++i)
          for (int64_t r = 0; r < m; ++r)
            std::copy(saved.begin() + (i * m + r) * n, saved.begin() + (i * m + r + 1) * n, c[i] + r * ldc);
      });
}

}  // namespace ember::kernels::cpu
