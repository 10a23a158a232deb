// Winograd F(2x2, 3x3) convolution on the CPU. See conv_winograd.h.

#include "conv_winograd.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../bf16/bf16_simd.h"
#include "../conv_parts.h"
#include "../../../core/cpu/cpu_features.h"
#include "../gemm.h"
#include "../bf16/amx_tiles.h"
#include "../bf16/gemm_bf16.h"
#include "winograd_filters.h"
#include "winograd_pairs.h"
#include "winograd_tiles.h"


namespace ember::kernels::cpu {

// Note [Winograd convolution]
// A 3x3 convolution computes each output from 9 inputs: 9 multiply-adds per output and input
// channel, which im2col + GEMM spends as they are. Winograd's minimal filtering algorithm F(2, 3)
// computes two neighbouring outputs of a 3-tap filter from four inputs d0..d3 with four products
// instead of six:
//   m0 = (d0 - d2) g0                  m1 = (d1 + d2) (g0 + g1 + g2) / 2
//   m3 = (d1 - d3) g2                  m2 = (d2 - d1) (g0 - g1 + g2) / 2
//   y0 = m0 + m1 + m2 = d0 g0 + d1 g1 + d2 g2
//   y1 = m1 - m2 - m3 = d1 g0 + d2 g1 + d3 g2
// In matrix form y = A^T [(G g) . (B^T d)], with the elementwise product in the middle:
//   B^T = | 1  0 -1  0 |     G = | 1    0    0   |     A^T = | 1  1  1  0 |
//         | 0  1  1  0 |         | 1/2  1/2  1/2 |           | 0  1 -1 -1 |
//         | 0 -1  1  0 |         | 1/2 -1/2  1/2 |
//         | 0  1  0 -1 |         | 0    0    1   |
// Nested in both dimensions, F(2x2, 3x3) turns a 4x4 input tile d into a 2x2 output tile
//   Y = A^T [ (G g G^T) . (B^T d B) ] A
// with 16 products instead of 36: 2.25 times fewer. The products of one tile position xi (one of
// the 16 entries of the 4x4 transformed tiles) over all channels are a matrix product:
//   M[xi] (K, P) = U[xi] (K, C) @ V[xi] (C, P)
// where U[xi] holds every filter's transformed weights (G g G^T)[xi] (K output by C input
// channels), V[xi] every input tile's transformed values (B^T d B)[xi] (C channels by P tiles),
// and M[xi] what the output transform A^T m A combines into each tile's four outputs. So the
// forward convolution is three steps (steps 1 and 3 in winograd_tiles.cpp, the rest below):
//   1. the input transform: the image cut into 4x4 tiles that overlap by 2 (zeros outside it, for
//      the padding), each channel's tile turned into 16 values, written to the 16 planes V[xi];
//   2. 16 GEMMs (OpenBLAS sgemm), 2.25 times fewer multiply-adds than im2col's one GEMM;
//   3. the output transform: 16 values per tile and output channel into 2x2 outputs, plus bias.
// The weights are transformed once per call (K C small 3x3 products, in double).
//
// The transforms add and subtract only (the 1/2 of G is exact), so the result differs from the
// direct sum only by rounding: the sums are grouped differently and the transformed values are
// up to 4 times the inputs (B^T d B sums 4 of them with signs) and 9/4 times the weights, which
// makes the float32 error a small multiple of im2col's — tests/test_conv_winograd.cpp bounds it
// against the float64 references. (F(4x4, 3x3) would save 4 times the products, but its
// transforms carry constants up to 8 and lose about 3 more bits: not worth it for training.)
//
// The gradient of the input is a convolution too: for a stride-1 3x3 convolution with padding
// p, dx = conv2d(dy, w') with padding 2 - p, where w'[c][k] is w[k][c] rotated by 180 degrees
// (the transposed convolution of a stride-1 convolution is the convolution with the flipped,
// channel-swapped filter). So backward_data runs the same three steps with C and K swapped.
//
// The gradient of the weights follows from Y = A^T M A with M[xi] = U[xi] V[xi], linear in U:
//   dM = A dY A^T (a 2x2 output-gradient tile into 4x4),   dU[xi] = sum over tiles dM[xi] V[xi]^T,
//   dg = G^T dU G (4x4 back to 3x3),
// so backward_weight transforms the input tiles as the forward pass does, the output-gradient
// tiles with A, runs 16 GEMMs of (K, tiles) by (tiles, C) — long sums, a shape GEMMs like — and
// transforms the K C sums back in double. dY of the outputs a cut tile does not have is 0.
//
// Tiles are numbered across the images of a part, q = image * tiles_per_image + ty * tiles_w +
// tx, and taken a block at a time (Note [Winograd tile blocks]), so the 16 planes of a block
// (16 (C + K) floats per tile) stay in the caches between the transforms and the GEMMs however
// large the images. The transforms walk each channel plane front to back, and write whole
// vectors (kRowSlack in winograd_tiles.h).
// When it applies: 3x3, stride 1, dilation 1, one group, padding at most 2 (so that the input
// gradient's padding 2 - p is not negative), and at least kMinChannels input and output
// channels — with few channels the transforms, not the products, are the work, and im2col's one
// GEMM is faster (the cnn model's first layer, 1 input channel, stays there).

// Note [bf16 Winograd products]
// A bf16 convolution on this path reads and writes bf16. On float32 planes (WinogradProducts::
// f32_planes; the only choice without AVX512_BF16) it computes in float32 as float32 does (Note
// [bf16 convolutions] in conv.cpp: exact products of the bf16 inputs, f32 sums, one rounding per
// result) — and then step 2 runs at float32's rate. On bf16 pairs (bf16_pairs), step 2 runs on
// VDPBF16PS (32 multiply-adds per instruction where an f32 FMA does 16) or on AMX tiles, which
// need their operands as bf16 pairs along the sum:
//   - forward and input gradient, M[xi] (K, tiles) = U[xi] (K, C) @ V[xi] (C, tiles): the sum
//     runs over channels. U is rounded to bf16 once per call and packed into 8-row slivers of
//     channel pairs, the words the micro-kernel broadcasts; each plane of V, made by the float32
//     input transform, is rounded and interleaved into channel pairs (one VCVTNE2PS2BF16 and one
//     VPERMW per 16 pairs) just before its product, 17 KB that stay in L1 for it.
//   - weight gradient, dU[xi] (K, C) = sum over tiles of W[xi] (K, tiles) @ V[xi]^T: the sum runs
//     over tiles. W's rows are rounded into pairs of neighbouring tiles as they lie; V is rounded
//     the same way and transposed (16 x 16 blocks of pairs) so that 16 channels of one pair of
//     tiles are one vector. Each part sums into its own f32 dU; the parts are added in order.
// The layouts are built in winograd_pairs.cpp; the micro-kernel is the bf16 GEMM's (bf16_dot.h):
// 8 rows by up to 48 columns, 24 accumulators. M and dU stay float32, the output and weight
// transforms are unchanged.
// Where amx_tiles() is not off (a CPU with AMX; the emulator when a test forces it) the same
// products run on AMX tiles instead (amx_pair_product, Note [bf16 GEMM on AMX tiles]): V's channel
// pairs and the transposed V^T pairs are already the pair rows AMX wants for its B tiles, and
// W's rows of tile pairs its A tiles; only U changes layout, to rows of channel pairs (its A
// tiles) padded to 16 pairs, with V's pair rows padded by zero rows to match (PairLayout in
// winograd_pairs.h). TDPBF16PS sums the same exact products in float32 in another order (Note
// [AMX tiles and their emulator]), so the results agree with the VDPBF16PS ones to f32 rounding.
//
// What it costs is one rounding (relative error at most 2^-9, half a bf16 unit in the last place)
// of each transformed value — V sums 4 inputs with signs, U sums up to 9 weights / 4, W up to
// 4 output gradients — where the float32 path rounds only the final results; VCVTNE2PS2BF16 also
// flushes float32 denormals in V and W to zero. The output transform adds 9 of the rounded
// products per output, so an output's error grows with the size of its terms rather than its own.
// tests/test_conv_winograd.cpp holds the path to that definition on both engines (a
// double-precision reference that rounds U, V and W the same way: all but a few elements bit for
// bit, the rest the next bf16 value up or down) and measures it against float64 on random data: RMS error 0.40-0.43% of the RMS
// value in each pass, against 0.16-0.18% on float32 planes (the final bf16 rounding alone), so
// about 2.5 times the rounding error, still within bf16's own precision (2^-8 = 0.39% spacing).
// Training accuracy under --amp bf16 is in docs/amp.md. bench_conv --dtype bfloat16 times both.
// Which of the two a layer's pass takes is measured (Note [When bf16 Winograd pays] in
// conv3x3_choice.cpp); EMBER_CPU_WINOGRAD_BF16=off (or set_winograd_bf16_products(false)) keeps
// float32 planes and the exact contract; so does a CPU without AVX512_BF16, or EMBER_CPU_BF16=off.
// float32 convolutions never round their planes.

namespace {

using conv_detail::ImageSplit;
using conv_detail::run_parts;
using conv_detail::scratch;
using conv_detail::split_images;
using winograd::grad_transform;
using winograd::input_transform;
using winograd::kPlanePad;
using winograd::make_problem;
using winograd::output_transform;
using winograd::Problem;
using winograd::row_ld;
using winograd::use_avx512;
#if EMBER_WINOGRAD_X86
using winograd::store16;
#endif

// Note [Winograd tile blocks]
// Tiles are transformed, multiplied and transformed back a block at a time; the block is the
// GEMMs' N. Each block streams the whole of U (16 K x C transformed weights) through the GEMMs,
// and holds 16 (C + K) floats of planes per tile. A large block amortizes U; a small one keeps
// the planes in the core's own cache (1 MB of L2 on Zen 4), which matters once two threads share
// the rest. Measured on a 2-vCPU AMD EPYC (Zen 4, 2026-12-05; bench_conv, forward and both
// gradients, ms on 1 / 2 threads), blocks of 256 against 64:
//   8 x 128 x 28 x 28 -> 128, bf16   26.2 / 23.6   against 24.7 / 16.2
//   8 x 64 x 56 x 56 -> 64, bf16     24.9 / 16.6   against 22.5 / 13.0
//   64 x 32 x 14 x 14 -> 64 (cnn)    f32 11.8 / 5.5, bf16 9.3 / 5.3   against 12.1 / 5.0, 7.9 / 4.0
//   8 x 256 x 14 x 14 -> 256, bf16   25.5 / 14.1   against 36.7 / 18.0 (U is 2 MB in bf16 pairs)
// so blocks of 64 tiles, and of 256 where K C reaches 256 x 256.
int64_t tile_block(int64_t C, int64_t K, int64_t tiles) {
  return std::min<int64_t>(C * K >= 256 * 256 ? 256 : 64, tiles);
}

std::atomic<int64_t> winograd_count{0};

// Whether bf16 convolutions run step 2 on bf16 pairs (Note [bf16 Winograd products]).
bool bf16_products_available() { return bf16_gemm_native_available(); }

std::atomic<bool>& bf16_products_on() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("EMBER_CPU_WINOGRAD_BF16");
    const bool off = env && (std::string(env) == "off" || std::string(env) == "0");
    return !off && bf16_products_available() && bf16_gemm_path() != Bf16GemmPath::f32_fallback;
  }()};
  return on;
}

#if EMBER_WINOGRAD_PAIRS
// What bf16 pair products run on: AMX tiles wherever amx_tiles() is not off (the hardware's, or
// the emulator's when a test forces it), else VDPBF16PS.
PairEngine pair_engine() { return amx_tiles() != AmxTiles::off ? PairEngine::amx : PairEngine::dot; }
#endif


// Filters per task of the weight transforms (each filter is independent: parallel over output
// channels, the same results for any thread count). A 512 x 512 layer has 262,144 filters, tens of
// milliseconds on one thread: run serially, the transforms were what kept a deep layer's
// convolution from getting faster with a second thread.
int64_t filter_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C)); }


#if EMBER_WINOGRAD_X86
// The filters (k, c) for c in [0, C / 8 * 8), eight channels at a time; returns where it stopped.
template <typename Filter>
__attribute__((target("avx512f"))) int64_t transform_filters8(int64_t K, int64_t C, int64_t k, const Filter& filter,
                                                              float* u) {
  const int64_t c8 = C / 8 * 8;
  for (int64_t c0 = 0; c0 < c8; c0 += 8) {
    Doubles8 r[16];
    filter_transform8(filter, k, c0, r);
    for (int xi = 0; xi < 16; ++xi) {
      const Floats8 f = __builtin_convertvector(r[xi], Floats8);
      std::memcpy(u + (xi * K + k) * C + c0, &f, sizeof f);
    }
  }
  return c8;
}
#endif

// U[xi][k][c] = (G g G^T)[xi] for g = filter(k, c): 9 values, row-major, the filter's tap (i, j)
// at g[3 i + j].
template <typename Filter>
void transform_weights(int64_t K, int64_t C, const Filter& filter, float* u) {
  [[maybe_unused]] const bool wide = use_avx512().load(std::memory_order_relaxed);
  parallel_for(0, K, filter_grain(C), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      int64_t c = 0;
#if EMBER_WINOGRAD_X86
      if (wide) c = transform_filters8(K, C, k, filter, u);
#endif
      for (; c < C; ++c) {
        const std::array<double, 9> f = filter(k, c);
        double g[9];
        std::copy(f.begin(), f.end(), g);
        double r[16];
        filter_transform(g, r);
        for (int xi = 0; xi < 16; ++xi) u[(xi * K + k) * C + c] = static_cast<float>(r[xi]);
      }
    }
  });
}

// ---- step 2 on bf16 pairs (Note [bf16 Winograd products]; the layouts: winograd_pairs.h) -----------

// The weight gradient's transformed planes dU as the parts left them: `parts` partial sums (one
// per part of the batch), each 16 planes of `rows` rows of `ld` floats (rows and ld may be padded
// past K and C). dU[xi][k][c] is their sum in part order, which the final transform adds as it
// reads (no pass of its own over 16 K C floats per part: 16 MB each at 512 x 512).
struct DuParts {
  const float* base;
  int64_t parts, part_elems, rows, ld;
  const float* at(int64_t part, int64_t xi, int64_t k, int64_t c) const {
    return base + part * part_elems + (xi * rows + k) * ld + c;
  }
  float sum(int64_t xi, int64_t k, int64_t c) const {
    float v = *at(0, xi, k, c);
    for (int64_t part = 1; part < parts; ++part) v += *at(part, xi, k, c);
    return v;
  }
};

#if EMBER_WINOGRAD_X86
// run() with step 2 on bf16 pairs: the input transform as float32 does it, each plane of V turned
// into channel pairs just before its product, M in float32 for the output transform.
// The weights as step 2 multiplies them: U in float32 (16 planes of K x C), or with bf16
// products U's bf16 pairs in pack_u_pairs's layout (winograd_pairs.h).
struct TransformedWeights {
  Scratch<float> u;
  Scratch<uint32_t> up;
  PairLayout layout;  // where up's pairs lie (with up)
};

#if EMBER_WINOGRAD_X86
// U's bf16 pairs straight from the filters, without U in float32 (16 K C floats written, read
// back, rounded and packed: at 512 x 512 that traffic was most of the transform's time). Filter
// row k, channels eight at a time as transform_filters8 computes them: each plane's eight values
// are rounded as BFloat16(float) rounds (bf16_bits16) and narrowed into four pair words, stored
// at the position pack_u_pairs gives them in layout L: the same words. The last channels (C % 8)
// are done one at a time.
template <typename Filter>
EMBER_AVX512_TARGET void pair_filter_row(const PairLayout& L, int64_t C, int64_t k, const Filter& filter,
                                         uint32_t* up) {
  auto word = [&](int xi, int64_t cp) -> uint32_t& { return up[L.u_at(xi, k, cp)]; };
  const int64_t c8 = C / 8 * 8;
  for (int64_t c0 = 0; c0 < c8; c0 += 8) {
    Doubles8 r[16];
    filter_transform8(filter, k, c0, r);
    for (int xi = 0; xi < 16; ++xi) {
      const __m256 f = (__m256)__builtin_convertvector(r[xi], Floats8);
      const __m256i bits = _mm512_cvtepi32_epi16(bf16_bits16(_mm512_zextps256_ps512(f)));  // 16 bf16, 8 used
      alignas(16) uint32_t pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(pairs), _mm256_castsi256_si128(bits));
      for (int j = 0; j < 4; ++j) word(xi, c0 / 2 + j) = pairs[j];
    }
  }
  for (int64_t c = c8; c < C; ++c) {
    const std::array<double, 9> f = filter(k, c);
    double g[9];
    std::copy(f.begin(), f.end(), g);
    double r[16];
    filter_transform(g, r);
    for (int xi = 0; xi < 16; ++xi) {
      const uint32_t bits = BFloat16(static_cast<float>(r[xi])).bits;
      uint32_t& w = word(xi, c / 2);
      w = c % 2 == 0 ? bits : (w | bits << 16);  // an odd C's last pair keeps a zero high half
    }
  }
}

template <typename Filter>
Scratch<uint32_t> transform_weight_pairs(const PairLayout& L, int64_t K, int64_t C, const Filter& filter) {
  Scratch<uint32_t> up = scratch<uint32_t>(16 * L.plane_words());
  for (int64_t xi = 0; xi < 16; ++xi)  // zeros: the rows past K, and (amx) the pairs past C's
    for (int64_t k = 0; k < L.k_rows; ++k)
      for (int64_t cp = k < K ? L.c2 : 0; cp < L.steps; ++cp) up[L.u_at(xi, k, cp)] = 0;
  parallel_for(0, K, filter_grain(C), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) pair_filter_row(L, C, k, filter, up.get());
  });
  return up;
}
#endif

// The weights for step 2 from filter (Filter: transform_weights's): U's bf16 pairs for a bf16
// convolution with bf16 products (straight from the filters with the AVX-512 transforms, else
// through U in float32), U in float32 otherwise.
template <typename T, typename Filter>
TransformedWeights transformed_weights(int64_t K, int64_t C, const Filter& filter, WinogradProducts products) {
  TransformedWeights wt;
#if EMBER_WINOGRAD_X86
  if constexpr (std::is_same_v<T, BFloat16>)
    if (products == WinogradProducts::bf16_pairs) {
      wt.layout = pair_layout(K, C, pair_engine());
      if (use_avx512().load(std::memory_order_relaxed)) {
        wt.up = transform_weight_pairs(wt.layout, K, C, filter);
      } else {
        const Scratch<float> u = scratch<float>(16 * K * C);
        transform_weights(K, C, filter, u.get());
        wt.up = pack_u_pairs(wt.layout, K, C, u.get());
      }
      return wt;
    }
#endif
  wt.u = scratch<float>(16 * K * C);
  transform_weights(K, C, filter, wt.u.get());
  return wt;
}

template <typename T>
void run_pairs(const Problem& p, const T* x, const TransformedWeights& wt, const float* bias, T* y) {
  const PairLayout& L = wt.layout;
  const ImageSplit s = split_images(p.n);
  const int64_t block = tile_block(p.C, p.K, p.n * p.tiles);
  const int64_t v_elems = 16 * (p.C * row_ld(block) + kPlanePad), m_elems = 16 * (L.k_rows * row_ld(block) + kPlanePad);
  const int64_t vp_elems = L.steps * row_ld(block);
  auto v_all = scratch<float>(s.parts * v_elems);
  auto m_all = scratch<float>(s.parts * m_elems);
  auto vp_all = scratch<uint32_t>(s.parts * vp_elems);
  run_parts(s, p.n, [&](int64_t part, int64_t lo, int64_t hi) {
    float* v = v_all.get() + part * v_elems;
    float* m = m_all.get() + part * m_elems;
    uint32_t* vp = vp_all.get() + part * vp_elems;
    std::fill(vp + L.c2 * row_ld(block), vp + vp_elems, 0u);  // the pair rows past C's (amx: whole tiles)
    for (int64_t t = lo * p.tiles; t < hi * p.tiles; t += block) {
      const int64_t count = std::min(block, hi * p.tiles - t);
      const int64_t ld = row_ld(count), cols = (count + 15) / 16 * 16;  // cols <= ld: kRowSlack
      input_transform(p, x, t, count, v);
      if (ld != row_ld(block)) std::fill(vp + L.c2 * ld, vp + L.steps * ld, 0u);  // a shorter last block
      for (int xi = 0; xi < 16; ++xi) {
        pair_channels(v + xi * (p.C * ld + kPlanePad), p.C, ld, cols, vp);
        // M[xi] (K rounded up to the engine's rows, cols) = U[xi] @ V[xi] on the pairs.
        pair_product_u(L, wt.up.get() + xi * L.plane_words(), vp, ld, cols, m + xi * (L.k_rows * ld + kPlanePad), ld);
      }
      output_transform(p, m, L.k_rows, bias, t, count, y);
    }
  });
  winograd_count.fetch_add(1, std::memory_order_relaxed);
}

// run_weight() with step 2 on bf16 pairs: dU[xi] (K x C) = sum over tiles W[xi] V[xi]^T, the
// planes transformed as float32 does it, then W in tile order and V transposed, both as pairs of
// tiles; each part sums into its own padded f32 dU, the parts added in part order.
template <typename T>
DuParts run_weight_pairs(const Problem& p, const T* x, const T* gy, Scratch<float>& store) {
  const PairLayout L = pair_layout(p.K, p.C, pair_engine());
  const int64_t k_rows = L.k_rows, cpad = (p.C + 15) / 16 * 16;
  const ImageSplit s = split_images(p.n);
  const int64_t block = tile_block(p.C, p.K, p.n * p.tiles);
  const int64_t max_pairs = ((block + 1) / 2 + 15) / 16 * 16;
  const int64_t v_elems = 16 * (p.C * row_ld(block) + kPlanePad), w_elems = 16 * (p.K * row_ld(block) + kPlanePad);
  const int64_t acc_elems = 16 * k_rows * cpad;
  auto v_all = scratch<float>(s.parts * v_elems);
  auto w_all = scratch<float>(s.parts * w_elems);
  auto wn_all = scratch<uint32_t>(s.parts * k_rows * max_pairs);
  auto vt_all = scratch<uint32_t>(s.parts * max_pairs * cpad);
  store = scratch<float>(s.parts * acc_elems);
  float* acc_all = store.get();
  run_parts(s, p.n, [&](int64_t part, int64_t lo, int64_t hi) {
    float* v = v_all.get() + part * v_elems;
    float* w = w_all.get() + part * w_elems;
    uint32_t* wn = wn_all.get() + part * k_rows * max_pairs;
    uint32_t* vt = vt_all.get() + part * max_pairs * cpad;
    float* acc = acc_all + part * acc_elems;
    if (lo == hi) std::fill(acc, acc + acc_elems, 0.0f);
    for (int64_t t = lo * p.tiles; t < hi * p.tiles; t += block) {
      const int64_t count = std::min(block, hi * p.tiles - t);
      const int64_t ld = row_ld(count), np = ((count + 1) / 2 + 15) / 16 * 16;
      input_transform(p, x, t, count, v);
      grad_transform(p, gy, t, count, w);
      std::fill(wn + p.K * np, wn + k_rows * np, 0u);  // the padding rows past K
      for (int xi = 0; xi < 16; ++xi) {
        pair_tiles(w + xi * (p.K * ld + kPlanePad), p.K, ld, count, np, wn);
        pair_tiles_transposed(v + xi * (p.C * ld + kPlanePad), p.C, ld, count, np, cpad, vt);
        pair_product_w(L, wn, np, vt, cpad, acc + xi * k_rows * cpad, t != lo * p.tiles);
      }
    }
  });
  winograd_count.fetch_add(1, std::memory_order_relaxed);
  return {acc_all, s.parts, acc_elems, k_rows, cpad};
}
#endif

template <typename T>
void run(const Problem& p, const T* x, const TransformedWeights& wt, const float* bias, T* y) {
#if EMBER_WINOGRAD_X86
  if constexpr (std::is_same_v<T, BFloat16>)
    if (wt.up) return run_pairs(p, x, wt, bias, y);
#endif
  const float* u = wt.u.get();
  const ImageSplit s = split_images(p.n);
  const int64_t block = tile_block(p.C, p.K, p.n * p.tiles);
  const int64_t v_elems = 16 * (p.C * row_ld(block) + kPlanePad), m_elems = 16 * (p.K * row_ld(block) + kPlanePad);
  auto v_all = scratch<float>(s.parts * v_elems);
  auto m_all = scratch<float>(s.parts * m_elems);
  run_parts(s, p.n, [&](int64_t part, int64_t lo, int64_t hi) {
    float* v = v_all.get() + part * v_elems;
    float* m = m_all.get() + part * m_elems;
    for (int64_t t = lo * p.tiles; t < hi * p.tiles; t += block) {
      const int64_t count = std::min(block, hi * p.tiles - t);
      const int64_t ld = row_ld(count);
      input_transform(p, x, t, count, v);
      for (int xi = 0; xi < 16; ++xi)  // step 2: M[xi] (K, count) = U[xi] (K, C) @ V[xi] (C, count)
        gemm(Transpose::No, Transpose::No, p.K, count, p.C, 1.0f, u + xi * p.K * p.C, p.C, v + xi * (p.C * ld + kPlanePad),
             ld, 0.0f, m + xi * (p.K * ld + kPlanePad), ld);
      output_transform(p, m, p.K, bias, t, count, y);
    }
  });
  winograd_count.fetch_add(1, std::memory_order_relaxed);
}

// The weight gradient: dU[xi] (K, C) = sum over the tiles of W[xi] (K, tiles) @ V[xi]^T, each part
// summing its own images' blocks in order, the parts then added in part order.
template <typename T>
DuParts run_weight(const Problem& p, const T* x, const T* gy, Scratch<float>& store, WinogradProducts products) {
#if EMBER_WINOGRAD_X86
  if constexpr (std::is_same_v<T, BFloat16>)
    if (products == WinogradProducts::bf16_pairs) return run_weight_pairs(p, x, gy, store);
#endif
  const ImageSplit s = split_images(p.n);
  const int64_t block = tile_block(p.C, p.K, p.n * p.tiles);
  const int64_t v_elems = 16 * (p.C * row_ld(block) + kPlanePad), w_elems = 16 * (p.K * row_ld(block) + kPlanePad);
  const int64_t u_elems = 16 * p.K * p.C;
  auto v_all = scratch<float>(s.parts * v_elems);
  auto w_all = scratch<float>(s.parts * w_elems);
  store = scratch<float>(s.parts * u_elems);  // a dU per part (DuParts)
  run_parts(s, p.n, [&](int64_t part, int64_t lo, int64_t hi) {
    float* v = v_all.get() + part * v_elems;
    float* w = w_all.get() + part * w_elems;
    float* acc = store.get() + part * u_elems;
    if (lo == hi) std::fill(acc, acc + u_elems, 0.0f);
    for (int64_t t = lo * p.tiles; t < hi * p.tiles; t += block) {
      const int64_t count = std::min(block, hi * p.tiles - t);
      const int64_t ld = row_ld(count);
      input_transform(p, x, t, count, v);
      grad_transform(p, gy, t, count, w);
      for (int xi = 0; xi < 16; ++xi)  // step 2: dU[xi] (K, C) (+)= W[xi] (K, count) @ V[xi]^T (count, C)
        gemm(Transpose::No, Transpose::Yes, p.K, p.C, count, 1.0f, w + xi * (p.K * ld + kPlanePad), ld,
             v + xi * (p.C * ld + kPlanePad), ld, t == lo * p.tiles ? 0.0f : 1.0f, acc + xi * p.K * p.C, p.C);
    }
  });
  winograd_count.fetch_add(1, std::memory_order_relaxed);
  return {store.get(), s.parts, u_elems, p.K, p.C};
}

}  // namespace

int64_t winograd_convolutions() { return winograd_count.load(std::memory_order_relaxed); }

bool winograd_vectorized() { return use_avx512().load(std::memory_order_relaxed); }

bool winograd_bf16_products() { return bf16_products_on().load(std::memory_order_relaxed); }

bool set_winograd_bf16_products(bool on) {
  if (on && !bf16_products_available()) return false;
  bf16_products_on().store(on, std::memory_order_relaxed);
  return true;
}

bool set_winograd_vectorized(bool on) {
#if EMBER_WINOGRAD_X86
  if (on && !(cpu_features().avx512f && cpu_features().avx512bw && cpu_features().avx512vl)) return false;
#else
  if (on) return false;
#endif
  use_avx512().store(on, std::memory_order_relaxed);
  return true;
}

namespace {

template <typename T>
void forward_impl(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, WinogradProducts products) {
  const Problem p = make_problem(g.n, g.c_in, g.h, g.w, g.c_out, g.pad_h, g.pad_w);
  const TransformedWeights wt = transformed_weights<T>(
      p.K, p.C,
      [&](int64_t k, int64_t c) {
        std::array<double, 9> f;
        for (int i = 0; i < 9; ++i) f[i] = static_cast<float>(w[(k * g.c_in + c) * 9 + i]);
        return f;
      },
      products);
  std::vector<float> b;  // the bias as float32 (added before the output's one rounding)
  if (bias)
    for (int64_t k = 0; k < g.c_out; ++k) b.push_back(static_cast<float>(bias[k]));
  run(p, x, wt, bias ? b.data() : nullptr, y);
}

template <typename T>
void backward_data_impl(const Conv2dGeometry& g, const T* gy, const T* w, T* gx, WinogradProducts products) {
  // dx = conv2d(dy, w') with padding 2 - p: C = c_out channels in, K = c_in out, and
  // w'[c_in][c_out] = w[c_out][c_in] rotated by 180 degrees.
  const Problem p = make_problem(g.n, g.c_out, g.out_h, g.out_w, g.c_in, 2 - g.pad_h, 2 - g.pad_w);
  const TransformedWeights wt = transformed_weights<T>(
      p.K, p.C,
      [&](int64_t k, int64_t c) {
        std::array<double, 9> f;
        for (int i = 0; i < 9; ++i) f[i] = static_cast<float>(w[(c * g.c_in + k) * 9 + 8 - i]);
        return f;
      },
      products);
  run<T>(p, gy, wt, nullptr, gx);
}

#if EMBER_WINOGRAD_X86
// dst[i] = src[i] for i < 72, as T.
EMBER_AVX512_TARGET inline void store_taps72(const float* src, float* dst) {
  for (int i = 0; i < 72; i += 16) store16(dst + i, i + 16 <= 72 ? 0xffff : 0xff, _mm512_loadu_ps(src + i));
}
EMBER_AVX512_TARGET inline void store_taps72(const float* src, BFloat16* dst) {
  for (int i = 0; i < 72; i += 16) store16(dst + i, i + 16 <= 72 ? 0xffff : 0xff, _mm512_loadu_ps(src + i));
}

// The weight gradient of filters (k, c) for c in [0, C / 8 * 8), eight channels at a time, into
// out[c * 9 + t]; returns where it stopped.
template <typename T>
__attribute__((target("avx512f"))) int64_t gradient_filters8(const Problem& p, int64_t k, const DuParts& du, T* out) {
  const int64_t c8 = p.C / 8 * 8;
  for (int64_t c0 = 0; c0 < c8; c0 += 8) {
    Doubles8 e[16];
    for (int xi = 0; xi < 16; ++xi) {
      Floats8 f, part;
      std::memcpy(&f, du.at(0, xi, k, c0), sizeof f);
      for (int64_t q = 1; q < du.parts; ++q) {  // DuParts::sum, 8 channels at a time
        std::memcpy(&part, du.at(q, xi, k, c0), sizeof part);
        f += part;
      }
      e[xi] = __builtin_convertvector(f, Doubles8);
    }
    Doubles8 dg[9];
    filter_gradient_transform(e, dg);
    // The eight filters' 72 taps lie together in out: transposed through a float buffer, then
    // stored 16 at a time (bf16: rounded as BFloat16(float) rounds, narrow16).
    alignas(64) float taps[80];
    for (int t = 0; t < 9; ++t) {
      const Floats8 f = __builtin_convertvector(dg[t], Floats8);
      for (int l = 0; l < 8; ++l) taps[l * 9 + t] = f[l];
    }
    store_taps72(taps, out + c0 * 9);
  }
  return c8;
}
#endif

template <typename T>
void backward_weight_impl(const Conv2dGeometry& g, const T* gy, const T* x, T* gw, WinogradProducts products) {
  const Problem p = make_problem(g.n, g.c_in, g.h, g.w, g.c_out, g.pad_h, g.pad_w);
  Scratch<float> store;
  const DuParts du = run_weight(p, x, gy, store, products);
  // dg = G^T dU G for each filter (3 x 3 from 4 x 4), in double (Note [Filter transforms eight
  // at a time]), rounded to float32, then (bf16) to the output's type. Parallel over output
  // channels, as transform_weights.
  [[maybe_unused]] const bool wide = use_avx512().load(std::memory_order_relaxed);
  parallel_for(0, p.K, filter_grain(p.C), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      int64_t c = 0;
#if EMBER_WINOGRAD_X86
      if (wide) c = gradient_filters8(p, k, du, gw + k * g.c_in * 9);
#endif
      for (; c < p.C; ++c) {
        double e[16];
        for (int xi = 0; xi < 16; ++xi) e[xi] = du.sum(xi, k, c);
        T* out = gw + (k * g.c_in + c) * 9;
        double dg[9];
        filter_gradient_transform(e, dg);
        for (int t = 0; t < 9; ++t) out[t] = T(static_cast<float>(dg[t]));
      }
    }
  });
}

}  // namespace

WinogradProducts winograd_default_products() {
  return winograd_bf16_products() ? WinogradProducts::bf16_pairs : WinogradProducts::f32_planes;
}

void winograd_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward_impl(g, x, w, bias, y, WinogradProducts::f32_planes);
}
void winograd_forward(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                      BFloat16* y, WinogradProducts products) {
  forward_impl(g, x, w, bias, y, products);
}
void winograd_backward_data(const Conv2dGeometry& g, const float* gy, const float* w, float* gx) {
  backward_data_impl(g, gy, w, gx, WinogradProducts::f32_planes);
}
void winograd_backward_data(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w, BFloat16* gx,
                            WinogradProducts products) {
  backward_data_impl(g, gy, w, gx, products);
}
void winograd_backward_weight(const Conv2dGeometry& g, const float* gy, const float* x, float* gw) {
  backward_weight_impl(g, gy, x, gw, WinogradProducts::f32_planes);
}
void winograd_backward_weight(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x, BFloat16* gw,
                              WinogradProducts products) {
  backward_weight_impl(g, gy, x, gw, products);
}

}  // namespace ember::kernels::cpu
