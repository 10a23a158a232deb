// The CPU bf16 GEMM (kernels/cpu/bf16/gemm_bf16.h, Note [bf16 GEMM on the CPU]) against a double
// reference computed from the same bf16 inputs, on every kernel: the AVX512_BF16 kernel (when this
// CPU has it), the f32 fallback, which every CPU can run, and the AMX kernel (Note [bf16 GEMM on
// AMX tiles]) on the tile emulator, which every CPU can run, and on the hardware's tiles where the
// CPU has them — there bit for bit against the emulator. Odd sizes, every transpose, alpha, beta,
// padded leading dimensions, f32 and bf16 C, one and several threads; counters prove which kernel
// ran. Then the measured path: each shape's kernel chosen by timing, its result the chosen kernel's.
//
// Bound, per element: the sum of k exact products (bf16 x bf16 fits an f32 significand) in f32,
// in any order, is off by at most (k + 4) u32 * S with u32 = 2^-24 and S = |alpha| sum |a b| +
// |beta c0| (alpha, beta and the final add included); a bf16 C adds one rounding, at most
// u16 = 2^-8 of the value.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ember/core/cpu/cpu_features.h>
#include <ember/kernels/cpu/bf16/amx_tiles.h>
#include <ember/kernels/cpu/bf16/gemm_bf16.h>
#include <ember/kernels/cpu/measured_choice.h>
#include <ember/core/cpu/parallel.h>

#include "fresh_choices.h"
#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;
using kernels::Transpose;

namespace {

struct Shape3 {
  int64_t m, n, k;
};

// Sizes: 1s, whole and partial 8 x 48 and 32 x 32 micro-tiles, odd k, k crossing the 256 block, m
// crossing the 128 and 144 blocks, n crossing the 2048 and 2064 blocks, long k, and products split
// over threads by columns and rows.
const std::vector<Shape3> kShapes = {{1, 1, 1},   {1, 37, 5},     {13, 1, 300},   {16, 96, 384},  {25, 70, 513},
                                     {7, 33, 2},  {150, 40, 64},  {3, 5, 1000},   {31, 2100, 9},  {40, 50, 3000},
                                     {145, 97, 27}, {64, 300, 200}, {300, 100, 100}};

std::vector<BFloat16> random_bf16(size_t n, uint32_t seed) {
  std::vector<BFloat16> v(n);
  const std::vector<double> d = testing::random_vector<double>(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = BFloat16(static_cast<float>(d[i]));
  return v;
}

// One product on the current path; `bf16_out` chooses C's type. Checks every element of C,
// including the padding between rows (must be untouched).
void check_product(Transpose ta, Transpose tb, Shape3 s, float alpha, float beta, bool bf16_out, uint32_t seed) {
  const auto [m, n, k] = s;
  const int64_t ar = ta == Transpose::No ? m : k, ac = ta == Transpose::No ? k : m;
  const int64_t br = tb == Transpose::No ? k : n, bc = tb == Transpose::No ? n : k;
  const int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
  const std::vector<BFloat16> a = random_bf16(static_cast<size_t>(ar * lda), seed);
  const std::vector<BFloat16> b = random_bf16(static_cast<size_t>(br * ldb), seed + 1);
  const std::vector<BFloat16> c0 = random_bf16(static_cast<size_t>(m * ldc), seed + 2);
  auto A = [&](int64_t i, int64_t p) { return double(ta == Transpose::No ? a[i * lda + p] : a[p * lda + i]); };
  auto B = [&](int64_t p, int64_t j) { return double(tb == Transpose::No ? b[p * ldb + j] : b[j * ldb + p]); };

  std::vector<float> cf(c0.size());
  std::vector<BFloat16> cb = c0;
  for (size_t i = 0; i < c0.size(); ++i) cf[i] = static_cast<float>(c0[i]);
  if (bf16_out)
    kc::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, cb.data(), ldc);
  else
    kc::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, cf.data(), ldc);

  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const double got = bf16_out ? double(cb[i * ldc + j]) : double(cf[i * ldc + j]);
      if (j >= n) {  // padding: untouched
        if (got != double(c0[i * ldc + j]) && bad++ < 3) FAIL_CHECK("padding changed at (" << i << ", " << j << ")");
        continue;
      }
      double sum = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += A(i, p) * B(p, j);
        mag += std::abs(A(i, p) * B(p, j));
      }
      const double c_in = beta == 0.0f ? 0.0 : double(c0[i * ldc + j]);
      const double ref = double(alpha) * sum + double(beta) * c_in;
      const double f32_err = double(k + 4) * std::ldexp(1.0, -24) * (std::abs(alpha) * mag + std::abs(beta * c_in));
      const double bound = f32_err + (bf16_out ? std::ldexp(1.0, -8) * (std::abs(ref) + f32_err) : 0.0);
      if (!(std::abs(got - ref) <= bound) && bad++ < 3)
        FAIL_CHECK("m " << m << " n " << n << " k " << k << " ta " << (ta == Transpose::Yes) << " tb "
                        << (tb == Transpose::Yes) << " alpha " << alpha << " beta " << beta << " bf16 C " << bf16_out
                        << ": C(" << i << ", " << j << ") = " << got << ", reference " << ref << ", bound " << bound);
    }
  CHECK(bad == 0);
}

void check_all(uint32_t seed) {
  const std::pair<float, float> scalars[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 2.0f}};
  for (const Shape3& s : kShapes)
    for (Transpose ta : {Transpose::No, Transpose::Yes})
      for (Transpose tb : {Transpose::No, Transpose::Yes})
        for (const auto& [alpha, beta] : scalars)
          for (bool bf16_out : {false, true}) check_product(ta, tb, s, alpha, beta, bf16_out, seed++);
  // k == 0: C = beta C.
  check_product(Transpose::No, Transpose::No, {5, 7, 0}, 1.0f, 0.5f, false, seed);
  check_product(Transpose::No, Transpose::Yes, {5, 7, 0}, 1.0f, 0.0f, true, seed);
}

// Restores the process-wide path, the AMX tiles and the thread count.
struct PathGuard {
  kc::Bf16GemmPath path = kc::bf16_gemm_path();
  kc::AmxTiles tiles = kc::amx_tiles();
  int threads = get_num_threads();
  ~PathGuard() {
    kc::set_amx_tiles(tiles);
    kc::set_bf16_gemm_path(path);
    set_num_threads(threads);
  }
};

// C after one product on the current path, f32 or bf16 C (as f32 values), from fixed operands.
std::vector<float> product_of(Transpose ta, Transpose tb, Shape3 s, float alpha, float beta, bool bf16_out,
                              uint32_t seed) {
  const auto [m, n, k] = s;
  const int64_t lda = (ta == Transpose::No ? k : m) + 3, ldb = (tb == Transpose::No ? n : k) + 1, ldc = n + 2;
  const std::vector<BFloat16> a = random_bf16(static_cast<size_t>((ta == Transpose::No ? m : k) * lda), seed);
  const std::vector<BFloat16> b = random_bf16(static_cast<size_t>((tb == Transpose::No ? k : n) * ldb), seed + 1);
  std::vector<BFloat16> cb = random_bf16(static_cast<size_t>(m * ldc), seed + 2);
  std::vector<float> cf(cb.size());
  for (size_t i = 0; i < cb.size(); ++i) cf[i] = static_cast<float>(cb[i]);
  if (!bf16_out) {
    kc::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, cf.data(), ldc);
    return cf;
  }
  kc::gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, cb.data(), ldc);
  for (size_t i = 0; i < cb.size(); ++i) cf[i] = static_cast<float>(cb[i]);
  return cf;
}

// A batch whose operands repeat (a broadcast A), bf16 C, against per-product gemm_bf16 calls.
void check_batched() {
  const int64_t m = 17, n = 45, k = 70, batch = 5;
  const std::vector<BFloat16> a = random_bf16(m * k, 7), b = random_bf16(batch * k * n, 8);
  std::vector<BFloat16> c(batch * m * n, BFloat16(1.0f)), want(batch * m * n, BFloat16(1.0f));
  std::vector<const BFloat16*> pa(batch, a.data()), pb(batch);
  std::vector<BFloat16*> pc(batch);
  for (int64_t i = 0; i < batch; ++i) {
    pb[i] = b.data() + i * k * n;
    pc[i] = c.data() + i * m * n;
    kc::gemm_bf16(Transpose::No, Transpose::No, m, n, k, 1.0f, a.data(), k, pb[i], n, 1.0f, want.data() + i * m * n,
                  n);
  }
  kc::gemm_bf16_batched(Transpose::No, Transpose::No, m, n, k, 1.0f, pa.data(), k, pb.data(), n, 1.0f, pc.data(), n,
                        batch);
  for (size_t i = 0; i < c.size(); ++i) REQUIRE(c[i].bits == want[i].bits);  // same kernel, same order
}

}  // namespace

TEST_CASE("gemm_bf16: the AVX512_BF16 kernel matches a double reference within f32 accumulation error",
          "[gemm][bf16]") {
  if (!kc::bf16_gemm_native_available()) {
    WARN("this CPU has no AVX512_BF16: only the f32 fallback is tested");
    CHECK(kc::bf16_gemm_path() == kc::Bf16GemmPath::f32_fallback);
    CHECK_FALSE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::avx512_bf16));
    return;
  }
  const PathGuard guard;
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::avx512_bf16));
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const int64_t before = kc::bf16_gemm_native_products();
    check_all(100);
    CHECK(kc::bf16_gemm_native_products() > before);  // the native kernel ran
    check_batched();
  }
}

TEST_CASE("gemm_bf16: the f32 fallback matches a double reference within f32 accumulation error", "[gemm][bf16]") {
  const PathGuard guard;
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::f32_fallback));
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const int64_t before = kc::bf16_gemm_native_products();
    check_all(200);
    check_batched();
    CHECK(kc::bf16_gemm_native_products() == before);  // nothing ran on the native kernel
  }
}

TEST_CASE("gemm_bf16: the AMX kernel on emulated tiles matches a double reference", "[gemm][bf16][amx]") {
  const PathGuard guard;
  REQUIRE(kc::set_amx_tiles(kc::AmxTiles::emulated));
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::amx));
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const int64_t before = kc::bf16_gemm_amx_products(), dots = kc::amx_emulator::dot_products();
    check_all(300);
    check_batched();
    CHECK(kc::bf16_gemm_amx_products() > before);            // the AMX kernel ran
    CHECK(kc::amx_emulator::dot_products() > dots + 1000);  // on the emulator's tiles
  }
}

TEST_CASE("gemm_bf16: the AMX kernel on hardware tiles gives the emulator's bits", "[gemm][bf16][amx]") {
  if (!kc::amx_hardware_usable()) {
    WARN("no AMX tiles here (" << kc::amx_description() << "): the AMX kernel ran on the emulator only");
    CHECK_FALSE(kc::set_amx_tiles(kc::AmxTiles::hardware));
    return;
  }
  WARN("the AMX kernel on this CPU's tiles, against the emulator");
  const PathGuard guard;
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::amx));
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    REQUIRE(kc::set_amx_tiles(kc::AmxTiles::hardware));
    const int64_t dots = kc::amx_emulator::dot_products();
    check_all(400);
    check_batched();
    CHECK(kc::amx_emulator::dot_products() == dots);  // the hardware ran, not the emulator
    // Every transpose, both scalars' cases and both outputs: hardware and emulator, the same bits
    // (packing with AVX-512 on the hardware, plain loops on the emulator).
    uint32_t seed = 500;
    int differ = 0;
    for (const Shape3& s : kShapes)
      for (Transpose ta : {Transpose::No, Transpose::Yes})
        for (Transpose tb : {Transpose::No, Transpose::Yes})
          for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f}, std::pair{-0.5f, 2.0f}})
            for (bool bf16_out : {false, true}) {
              REQUIRE(kc::set_amx_tiles(kc::AmxTiles::hardware));
              const std::vector<float> hw = product_of(ta, tb, s, alpha, beta, bf16_out, seed);
              REQUIRE(kc::set_amx_tiles(kc::AmxTiles::emulated));
              const std::vector<float> emu = product_of(ta, tb, s, alpha, beta, bf16_out, seed++);
              if (hw != emu && differ++ < 3)
                FAIL_CHECK("m " << s.m << " n " << s.n << " k " << s.k << " ta " << (ta == Transpose::Yes) << " tb "
                                << (tb == Transpose::Yes) << ": hardware and emulator differ");
            }
    CHECK(differ == 0);
  }
}

TEST_CASE("gemm_bf16: the measured path takes each shape's fastest kernel, with its result", "[gemm][bf16]") {
  const PathGuard guard;
  if (!kc::set_bf16_gemm_path(kc::Bf16GemmPath::measured) || !kc::bf16_gemm_native_available()) {
    WARN("one bf16 kernel on this CPU (the f32 fallback): nothing to measure");
    return;
  }
  set_num_threads(1);
  const testing::FreshChoices fresh;  // this process's own measurement, not the choices file's
  const Shape3 s{64, 300, 288};
  const std::vector<float> measured = product_of(Transpose::No, Transpose::Yes, s, 1.0f, 1.0f, false, 900);
  const std::vector<kc::MeasuredChoice> made = kc::measured_choices();
  REQUIRE(made.size() == 1);
  const kc::MeasuredChoice& c = made[0];
  INFO(c.family << " " << c.shape << ": " << c.candidates[c.chosen]);
  CHECK(c.family == "gemm_bf16");
  CHECK(c.shape == "NT 64x300x288, 1 thread");
  CHECK(c.candidates.back() == "f32");
  CHECK(c.candidates.size() == (kc::amx_tiles() == kc::AmxTiles::hardware ? 3u : 2u));
  for (size_t i = 0; i < c.candidates.size(); ++i) CHECK(c.seconds[i] > 0.0);
  CHECK(c.seconds[c.chosen] == *std::min_element(c.seconds.begin(), c.seconds.end()));
  // The first call's C (beta = 1: restored before every timed run) is the chosen kernel's.
  const std::string chosen = c.candidates[c.chosen];
  REQUIRE(kc::set_bf16_gemm_path(chosen == "amx"           ? kc::Bf16GemmPath::amx
                                 : chosen == "avx512_bf16" ? kc::Bf16GemmPath::avx512_bf16
                                                           : kc::Bf16GemmPath::f32_fallback));
  CHECK(product_of(Transpose::No, Transpose::Yes, s, 1.0f, 1.0f, false, 900) == measured);
  // Cached: the shape is not measured again.
  REQUIRE(kc::set_bf16_gemm_path(kc::Bf16GemmPath::measured));
  CHECK(product_of(Transpose::No, Transpose::Yes, s, 1.0f, 1.0f, false, 900) == measured);
  CHECK(kc::measured_choices().size() == 1);
}

TEST_CASE("gemm_bf16: the path follows the CPU's features", "[gemm][bf16]") {
  const ember::CpuFeatures& f = ember::cpu_features();
  const bool has = f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16;
  CHECK(kc::bf16_gemm_native_available() == has);
  CHECK(kc::amx_hardware_usable() ==
        (f.amx_tile && f.amx_bf16 && ember::amx_tiles_status().permission == ember::AmxPermission::granted));
  const char* env = std::getenv("EMBER_CPU_BF16");
  const std::string v = env ? env : "";
  if (v.empty()) {
    // Measured wherever a second kernel can run; the AMX kernel is a candidate only on hardware tiles.
    const bool several = has || kc::amx_tiles() == kc::AmxTiles::hardware;
    CHECK(kc::bf16_gemm_path() == (several ? kc::Bf16GemmPath::measured : kc::Bf16GemmPath::f32_fallback));
  }
  if (v == "off" || v == "0" || v == "f32") CHECK(kc::bf16_gemm_path() == kc::Bf16GemmPath::f32_fallback);
  CHECK(std::string(kc::bf16_gemm_path_name(kc::Bf16GemmPath::avx512_bf16)) == "avx512_bf16");
  CHECK(std::string(kc::bf16_gemm_path_name(kc::Bf16GemmPath::amx)) == "amx");
  WARN("bf16 GEMM: " << kc::bf16_gemm_description() << "; AMX " << kc::amx_description());
}
