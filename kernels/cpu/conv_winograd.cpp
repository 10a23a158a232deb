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

#include "bf16_simd.h"
#include "conv_parts.h"
#include "cpu_features.h"
#include "gemm.h"
#include "gemm_bf16.h"
#include "winograd_filters.h"
#include "winograd_pairs.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_WINOGRAD_X86 1
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_undefined_*() (as in bf16_simd.h)
#endif
#else
#define EMBER_WINOGRAD_X86 0
#endif

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
// forward convolution is three steps, each written out below:
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
// large the images. The
// transforms walk each channel plane front to back, and write whole vectors (kRowSlack).
// When it applies: 3x3, stride 1, dilation 1, one group, padding at most 2 (so that the input
// gradient's padding 2 - p is not negative), and at least kMinChannels input and output
// channels — with few channels the transforms, not the products, are the work, and im2col's one
// GEMM is faster (the cnn model's first layer, 1 input channel, stays there).

// Note [bf16 Winograd products]
// A bf16 convolution on this path reads and writes bf16. Without AVX512_BF16 it computes in
// float32 as float32 does (Note [bf16 convolutions] in conv.cpp: exact products of the bf16
// inputs, f32 sums, one rounding per result) — and then step 2 runs at float32's rate, so
// --amp bf16 gains nothing on the path that holds most of a CNN's products. With AVX512_BF16,
// step 2 runs on VDPBF16PS (32 multiply-adds per instruction where an f32 FMA does 16), which
// needs its operands as bf16 pairs along the sum:
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
//
// What it costs is one rounding (relative error at most 2^-9, half a bf16 unit in the last place)
// of each transformed value — V sums 4 inputs with signs, U sums up to 9 weights / 4, W up to
// 4 output gradients — where the float32 path rounds only the final results; VCVTNE2PS2BF16 also
// flushes float32 denormals in V and W to zero. The output transform adds 9 of the rounded
// products per output, so an output's error grows with the size of its terms rather than its own.
// tests/test_conv_winograd.cpp holds the path to that definition (a double-precision reference
// that rounds U, V and W the same way: all but a few elements bit for bit, the rest within a
// bf16 unit) and measures it against float64 on random data: RMS error 0.40-0.43% of the RMS
// value in each pass, against 0.16-0.18% on float32 planes (the final bf16 rounding alone), so
// about 2.5 times the rounding error, still within bf16's own precision (2^-8 = 0.39% spacing).
// Training accuracy under --amp bf16 is in docs/amp.md. bench_conv --dtype bfloat16 times both.
// EMBER_CPU_WINOGRAD_BF16=off (or set_winograd_bf16_products(false)) keeps float32 planes and
// the exact contract; so does a CPU without AVX512_BF16, or EMBER_CPU_BF16=off. float32
// convolutions never round their planes.

namespace {

using conv_detail::ImageSplit;
using conv_detail::run_parts;
using conv_detail::scratch;
using conv_detail::split_images;

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
constexpr int64_t kMinChannels = 16;  // both C and K at least this
// The 16 planes of V and of M lie this many floats more than their size apart. The transforms
// read or write all 16 at once, and with a power-of-two plane (C count floats: 32 x 512 x 4
// bytes) the 16 streams would share the same cache sets and evict one another.
constexpr int64_t kPlanePad = 16;
// Each row of a V, W or M plane (one channel's tiles of the block) has this many floats of room
// past its `count` tiles: the AVX-512 transforms store whole vectors of 8 tiles, and the lanes
// past a tile row's last tile land in the slots of the next tile row, written later, or here.
// (Masked stores cost several times an ordinary one on Zen 4.)
constexpr int64_t kRowSlack = 16;
int64_t row_ld(int64_t count) { return count + kRowSlack; }

Conv3x3Path default_path() {
  const char* env = std::getenv("EMBER_CPU_CONV");
  if (env && std::string(env) == "im2col") return Conv3x3Path::im2col;
  if (env && std::string(env) == "winograd") return Conv3x3Path::winograd;
  return Conv3x3Path::automatic;
}

// Note [When bf16 Winograd pays]
// Winograd's products work on the weights transformed into 16 planes of K x C: every call
// transforms them (and, for the input gradient, the rotated filters), rounds them into bf16 pairs,
// and for the weight gradient transforms a float32 dU of 16 K x C planes back — work that grows
// with the weights, not with the batch, amortized over the call's tiles (2 x 2 outputs each). With
// few tiles — deep layers of small images, where K and C are large and the planes small — that
// work dominates; im2col + GEMM, whose bf16 GEMM runs on VDPBF16PS too, has none of it and wins.
// Measured on a 2-vCPU AMD EPYC (Zen 4, 2026-12-05, after the filter transforms went eight
// channels at a time: Note [Filter transforms eight at a time]; bench_conv --dtype bfloat16
// --products bf16, forward and both gradients, ms on 1 / 2 threads; the call's tiles):
//   4 x 512 x 7 x 7 -> 512    (64 tiles)     Winograd 26.2 / 14.9   im2col 17.6 / 9.9
//   8 x 512 x 4 x 4 -> 512    (32)           Winograd 18.6 / 11.5   im2col 12.9 / 7.3
//   16 x 512 x 4 x 4 -> 512   (64)           Winograd 24.0 / 14.7   im2col 25.8 / 13.2
//   2 x 256 x 14 x 14 -> 256  (98)           Winograd 6.9 / 4.0     im2col 8.6 / 4.4
//   8 x 512 x 7 x 7 -> 512    (128)          Winograd 33.7 / 20.0   im2col 35.4 / 18.8
//   32 x 512 x 4 x 4 -> 512   (128)          Winograd 38.0 / 20.4   im2col 53.2 / 29.3
//   16 x 512 x 7 x 7 -> 512   (256)          Winograd 54.5 / 29.5   im2col 71.7 / 36.9
//   8 x 256 x 14 x 14 -> 256  (392)          Winograd 18.6 / 12.4   im2col 33.6 / 20.4
//   64 x 256 x 8 x 8 -> 256   (1024)         Winograd 54.2 / 29.8   im2col 108.8 / 56.3
// and ResNet-18's bf16 step at batch 8 (bench_resnet_step, 4 interleaved rounds) with its layer4
// 3 x 3s (the 128-tile row) on Winograd against im2col: 0.458 against 0.476 s on one thread,
// 0.258 against 0.268 on two. So under Conv3x3Path::automatic a bf16 convolution with bf16
// products takes Winograd from kMinBf16Tiles tiles per call up, whatever the thread count (the
// 98-tile row is the one loss). float32 keeps Winograd wherever it applies: its im2col GEMM runs
// at float32's rate, and the same layers showed no clear crossover (8 x 512 x 7 x 7: Winograd 68 /
// 54 against im2col 61 / 33; 32 x 512 x 4 x 4: 71 / 53 against 89 / 58).
constexpr int64_t kMinBf16Tiles = 128;

// The tiles of this call's Winograd problem: over the output, or over the input for its gradient.
int64_t call_tiles(const Conv2dGeometry& g, bool backward_data) {
  const int64_t h = backward_data ? g.h : g.out_h, w = backward_data ? g.w : g.out_w;
  return g.n * ((h + 1) / 2) * ((w + 1) / 2);
}

std::atomic<int>& chosen_path() {
  static std::atomic<int> path{static_cast<int>(default_path())};
  return path;
}

std::atomic<int64_t> winograd_count{0};

// Whether bf16 convolutions run step 2 on bf16 pairs (Note [bf16 Winograd products]).
bool bf16_products_available() { return bf16_gemm_native_available(); }

std::atomic<bool>& bf16_products_on() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("EMBER_CPU_WINOGRAD_BF16");
    const bool off = env && (std::string(env) == "off" || std::string(env) == "0");
    return !off && bf16_products_available() && bf16_gemm_path() == Bf16GemmPath::avx512_bf16;
  }()};
  return on;
}

// One Winograd convolution: y (n, K, oh, ow) from x (n, C, h, w) padded by (pad_h, pad_w), with
// oh = h + 2 pad_h - 2 and ow = w + 2 pad_w - 2, and the weights already transformed: u[xi][k][c].
struct Problem {
  int64_t n, C, h, w, K, pad_h, pad_w, oh, ow;
  int64_t tiles_h, tiles_w, tiles;  // per image: ceil(oh / 2) x ceil(ow / 2)
};

Problem make_problem(int64_t n, int64_t C, int64_t h, int64_t w, int64_t K, int64_t pad_h, int64_t pad_w) {
  Problem p{n, C, h, w, K, pad_h, pad_w, h + 2 * pad_h - 2, w + 2 * pad_w - 2, 0, 0, 0};
  p.tiles_h = (p.oh + 1) / 2;
  p.tiles_w = (p.ow + 1) / 2;
  p.tiles = p.tiles_h * p.tiles_w;
  return p;
}

// Filters per task of the weight transforms (each filter is independent: parallel over output
// channels, the same results for any thread count). A 512 x 512 layer has 262,144 filters, tens of
// milliseconds on one thread: run serially, the transforms were what kept a deep layer's
// convolution from getting faster with a second thread.
int64_t filter_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C)); }

std::atomic<bool>& use_avx512();  // the AVX-512 transforms' switch (below)

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

// The tiles [q0, q0 + count) of a part, walked one tile row at a time: f(image, ty, tx0, tx1, q)
// for the tiles tx0 <= tx < tx1 of row ty of an image, the first of which is block column q.
template <typename F>
void for_each_tile_row(const Problem& p, int64_t first_tile, int64_t count, const F& f) {
  int64_t t = first_tile, q = 0;
  while (q < count) {
    const int64_t image = t / p.tiles, ty = (t % p.tiles) / p.tiles_w, tx0 = t % p.tiles_w;
    const int64_t tx1 = std::min(p.tiles_w, tx0 + (count - q));
    f(image, ty, tx0, tx1, q);
    q += tx1 - tx0;
    t += tx1 - tx0;
  }
}

// The tile rows of for_each_tile_row as a list, so that a transform can walk them once per
// channel: a channel plane is then read (or written) front to back, where walking all channels
// for each tile row jumps between planes and misses the caches on every row (measured: most of
// the transforms' time went to those misses).
struct TileRow {
  int64_t image, ty, tx0, tx1, q;
};
std::vector<TileRow> tile_rows(const Problem& p, int64_t first_tile, int64_t count) {
  std::vector<TileRow> rows;
  for_each_tile_row(p, first_tile, count, [&](int64_t image, int64_t ty, int64_t tx0, int64_t tx1, int64_t q) {
    rows.push_back({image, ty, tx0, tx1, q});
  });
  return rows;
}

// ---- the transforms of one tile row: portable, and AVX-512 -----------------------------------------
//
// Both compute the same sums in the same order, so they agree bit for bit (tests run both). The
// portable loops take one tile at a time; the AVX-512 ones take 8 tiles (input) or 16 (output)
// per instruction, reading the input and writing the output through masks that stand for the
// padding and the image's edges — a tile row of a small image (the cnn model's 14 x 14 has 7
// tiles per row) is too short for the compiler's own vectorization, and a copy into padded rows
// cost more than the arithmetic.

// Step 1 for the tiles tx0 <= tx < tx1 of tile row ty of one channel plane xc (h, w):
// v[(4 i + j) plane + tx] = (B^T d B)[i][j] of tile tx, d its 4 x 4 input (zero outside the image).
template <typename T>
void input_row_portable(const Problem& p, const T* xc, int64_t ty, int64_t tx0, int64_t tx1, float* v, int64_t plane) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float d[4][4];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        const int64_t iy = 2 * ty - p.pad_h + r, ix = 2 * tx - p.pad_w + c;
        d[r][c] = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? static_cast<float>(xc[iy * p.w + ix]) : 0.0f;
      }
    float t[4][4];  // B^T d, down the columns
    for (int c = 0; c < 4; ++c) {
      t[0][c] = d[0][c] - d[2][c];
      t[1][c] = d[1][c] + d[2][c];
      t[2][c] = d[2][c] - d[1][c];
      t[3][c] = d[1][c] - d[3][c];
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B, along the rows
      v[(i * 4 + 0) * plane + tx] = t[i][0] - t[i][2];
      v[(i * 4 + 1) * plane + tx] = t[i][1] + t[i][2];
      v[(i * 4 + 2) * plane + tx] = t[i][2] - t[i][1];
      v[(i * 4 + 3) * plane + tx] = t[i][1] - t[i][3];
    }
  }
}

// Step 3 for the tiles tx0 <= tx < tx1 of tile row ty of one output plane yk (oh, ow):
// mi[4 i + j][tx] is m[i][j] of tile tx; the tile's 2 x 2 outputs A^T m A + add, cut to the plane.
template <typename T>
void output_row_portable(const Problem& p, const float* const mi[16], int64_t ty, int64_t tx0, int64_t tx1, float add,
                         T* yk) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float s0[4], s1[4];  // A^T m: 2 rows of 4
    for (int j = 0; j < 4; ++j) {
      const float m0 = mi[j][tx], m1 = mi[4 + j][tx], m2 = mi[8 + j][tx], m3 = mi[12 + j][tx];
      s0[j] = m0 + m1 + m2;
      s1[j] = m1 - m2 - m3;
    }
    const float out[2][2] = {{s0[0] + s0[1] + s0[2], s0[1] - s0[2] - s0[3]},
                             {s1[0] + s1[1] + s1[2], s1[1] - s1[2] - s1[3]}};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + c;
        if (oy < p.oh && ox < p.ow) yk[oy * p.ow + ox] = T(out[r][c] + add);
      }
  }
}

// The weight gradient's step 1 for dy: w[(4 i + j) plane + tx] = (A dy A^T)[i][j] of tile tx of
// tile row ty of one output-gradient plane gk (oh, ow), dy the tile's 2 x 2 (zero past the plane).
template <typename T>
void grad_row_portable(const Problem& p, const T* gk, int64_t ty, int64_t tx0, int64_t tx1, float* w, int64_t plane) {
  for (int64_t tx = tx0; tx < tx1; ++tx) {
    float dy[2][2];
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + c;
        dy[r][c] = oy < p.oh && ox < p.ow ? static_cast<float>(gk[oy * p.ow + ox]) : 0.0f;
      }
    float t[4][2];  // A dy, down the columns: rows dy0, dy0 + dy1, dy0 - dy1, -dy1
    for (int c = 0; c < 2; ++c) {
      t[0][c] = dy[0][c];
      t[1][c] = dy[0][c] + dy[1][c];
      t[2][c] = dy[0][c] - dy[1][c];
      t[3][c] = -dy[1][c];
    }
    for (int i = 0; i < 4; ++i) {  // (A dy) A^T, along the rows
      const float t0 = t[i][0], t1 = t[i][1];
      w[(i * 4 + 0) * plane + tx] = t0;
      w[(i * 4 + 1) * plane + tx] = t0 + t1;
      w[(i * 4 + 2) * plane + tx] = t0 - t1;
      w[(i * 4 + 3) * plane + tx] = -t1;
    }
  }
}

#if EMBER_WINOGRAD_X86
#define EMBER_AVX512_TARGET EMBER_BF16_SIMD_TARGET

// 16 values as floats (lanes outside `m` are not read and are 0): f32 as they are, bf16 widened
// (exact). And the lanes in `m` stored: f32 as they are, bf16 rounded as BFloat16(float) does.
EMBER_AVX512_TARGET inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
EMBER_AVX512_TARGET inline __m512 load16(const BFloat16* p, __mmask16 m) { return widen16(p, m); }
EMBER_AVX512_TARGET inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
EMBER_AVX512_TARGET inline void store16(BFloat16* p, __mmask16 m, __m512 v) { narrow16(v, p, m); }

// The lanes [a, b) of a 16-lane vector (clipped to 0..16).
inline __mmask16 lanes_between(int64_t a, int64_t b) {
  a = std::max<int64_t>(a, 0), b = std::min<int64_t>(b, 16);
  return b <= a ? 0 : static_cast<__mmask16>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

// The lanes l of a 16-float access at column c0 + l whose column lies in [0, w).
inline __mmask16 columns_inside(int64_t c0, int64_t w) { return lanes_between(-c0, w - c0); }

// The low 8 lanes.
EMBER_AVX512_TARGET inline __m256 low8(__m512 v) { return _mm512_castps512_ps256(v); }

// 8 tiles at a time. The 16 columns from 2 tx - pad_w + s (s = 0..3) hold input column s of
// tile tx + l at lane 2l, so vector arithmetic on the four shifted vectors computes every tile's
// transform in the even lanes, which are then packed into 8 consecutive floats and stored. The
// shifts are made in registers from two loads per row.
template <typename T>
EMBER_AVX512_TARGET void input_row_avx512(const Problem& p, const T* xc, int64_t ty, int64_t tx0, int64_t tx1, float* v,
                                          int64_t plane) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const T* rows[4];
  bool inside[4];
  for (int r = 0; r < 4; ++r) {
    const int64_t iy = 2 * ty - p.pad_h + r;
    inside[r] = iy >= 0 && iy < p.h;
    rows[r] = xc + (inside[r] ? iy : 0) * p.w;
  }
  for (int64_t tx = tx0; tx < tx1; tx += 8) {
    // Input row r at columns c0 + lane (lo) and c0 + 16 + lane (hi), c0 = 2 tx - pad_w, zero
    // outside the image (masked-off lanes are not read, so the pointer may lie before the row).
    const int64_t c0 = 2 * tx - p.pad_w;
    const __mmask16 m_lo = columns_inside(c0, p.w), m_hi = columns_inside(c0 + 16, p.w);
    __m512 lo[4], hi[4];
    for (int r = 0; r < 4; ++r) {
      lo[r] = inside[r] ? load16(rows[r] + c0, m_lo) : _mm512_setzero_ps();
      hi[r] = inside[r] ? load16(rows[r] + c0 + 16, m_hi) : _mm512_setzero_ps();
    }
    // B^T d down the columns, on both halves; then t[i][s] = those columns shifted left by s
    // lanes (valignd across the two halves): lane 2l of t[i][s] is column s of tile tx + l.
    __m512 t[4][4];
    const __m512 tl[4] = {_mm512_sub_ps(lo[0], lo[2]), _mm512_add_ps(lo[1], lo[2]), _mm512_sub_ps(lo[2], lo[1]),
                          _mm512_sub_ps(lo[1], lo[3])};
    const __m512 th[4] = {_mm512_sub_ps(hi[0], hi[2]), _mm512_add_ps(hi[1], hi[2]), _mm512_sub_ps(hi[2], hi[1]),
                          _mm512_sub_ps(hi[1], hi[3])};
    for (int i = 0; i < 4; ++i) {
      const __m512i l = _mm512_castps_si512(tl[i]), h = _mm512_castps_si512(th[i]);
      t[i][0] = tl[i];
      t[i][1] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 1));
      t[i][2] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 2));
      t[i][3] = _mm512_castsi512_ps(_mm512_alignr_epi32(h, l, 3));
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B, along the rows
      float* vi = v + i * 4 * plane + tx;  // 8 lanes stored whatever tx1 is: kRowSlack
      _mm256_storeu_ps(vi, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][0], t[i][2]))));
      _mm256_storeu_ps(vi + plane, low8(_mm512_permutexvar_ps(even, _mm512_add_ps(t[i][1], t[i][2]))));
      _mm256_storeu_ps(vi + 2 * plane, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][2], t[i][1]))));
      _mm256_storeu_ps(vi + 3 * plane, low8(_mm512_permutexvar_ps(even, _mm512_sub_ps(t[i][1], t[i][3]))));
    }
  }
}

// A run of tiles of one tile row inside a group of 16 consecutive tiles of a block: lanes
// [lane0, lane1) of the group are tiles tx0, tx0 + 1, ... of row ty of `image`.
struct Segment {
  int64_t image, ty, tx0, lane0, lane1;
};

// 16 consecutive tiles of the block at a time (lane l: tile q0 + l), whatever rows and images
// they belong to, so that a short tile row (7 tiles at 14 x 14) does not leave most lanes idle:
// m[xi] is loaded from 16 consecutive columns of each plane, the (r, 0) and (r, 1) outputs of
// tile l are interleaved into lanes 2l and 2l + 1 of 32, and each segment of the group is stored
// into its own output row through a mask. `segments` lists the group's segments (at most 16).
template <typename T>
EMBER_AVX512_TARGET void output_group_avx512(const Problem& p, const float* const mi[16], int64_t lanes,
                                             const Segment* segments, int64_t nseg, float add, T* yk_image0,
                                             int64_t image_stride) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 bias = _mm512_set1_ps(add);
  const __mmask16 load = lanes_between(0, lanes);
  __m512 s0[4], s1[4];
  for (int j = 0; j < 4; ++j) {
    const __m512 m0 = _mm512_maskz_loadu_ps(load, mi[j]), m1 = _mm512_maskz_loadu_ps(load, mi[4 + j]);
    const __m512 m2 = _mm512_maskz_loadu_ps(load, mi[8 + j]), m3 = _mm512_maskz_loadu_ps(load, mi[12 + j]);
    s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
  }
  const __m512 out0[2] = {_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]),
                          _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3])};
  const __m512 out1[2] = {_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]),
                          _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3])};
  // Output columns in lane order: lane e of `cols[r][h]` is output (r, e % 2) of tile (16 h + e) / 2.
  const __m512 cols[2][2] = {
      {_mm512_add_ps(_mm512_permutex2var_ps(out0[0], lo, out0[1]), bias),
       _mm512_add_ps(_mm512_permutex2var_ps(out0[0], hi, out0[1]), bias)},
      {_mm512_add_ps(_mm512_permutex2var_ps(out1[0], lo, out1[1]), bias),
       _mm512_add_ps(_mm512_permutex2var_ps(out1[0], hi, out1[1]), bias)}};
  for (int64_t si = 0; si < nseg; ++si) {
    const Segment& sg = segments[si];
    // Lane e (of 32) holds output column 2 tx0 - 2 lane0 + e of the segment's rows.
    const int64_t shift = 2 * sg.tx0 - 2 * sg.lane0;
    const int64_t e0 = 2 * sg.lane0, e1 = std::min(2 * sg.lane1, p.ow - shift);  // lanes inside the plane
    T* plane = yk_image0 + sg.image * image_stride;
    for (int r = 0; r < 2; ++r) {
      const int64_t oy = 2 * sg.ty + r;
      if (oy >= p.oh) break;
      T* dst = plane + oy * p.ow + shift;  // masked-off lanes are not written: may point before the row
      store16(dst, lanes_between(e0, e1), cols[r][0]);
      store16(dst + 16, lanes_between(e0 - 16, e1 - 16), cols[r][1]);
    }
  }
}

// -v, by its sign bit (as the portable loop's unary minus).
EMBER_AVX512_TARGET inline __m512 negate(__m512 v) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// 8 tiles at a time: the 16 columns from 2 tx of the tile row's two output rows, split into
// their even (left) and odd (right) columns, one tile per lane.
template <typename T>
EMBER_AVX512_TARGET void grad_row_avx512(const Problem& p, const T* gk, int64_t ty, int64_t tx0, int64_t tx1, float* w,
                                         int64_t plane) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
  const bool second_row = 2 * ty + 1 < p.oh;
  for (int64_t tx = tx0; tx < tx1; tx += 8) {
    const __mmask16 m = columns_inside(2 * tx, p.ow);
    const T* r0 = gk + 2 * ty * p.ow + 2 * tx;
    const __m512 row0 = load16(r0, m);
    const __m512 row1 = second_row ? load16(r0 + p.ow, m) : _mm512_setzero_ps();
    const __m512 dy[2][2] = {{_mm512_permutexvar_ps(even, row0), _mm512_permutexvar_ps(odd, row0)},
                             {_mm512_permutexvar_ps(even, row1), _mm512_permutexvar_ps(odd, row1)}};
    __m512 t[4][2];  // A dy, down the columns
    for (int c = 0; c < 2; ++c) {
      t[0][c] = dy[0][c];
      t[1][c] = _mm512_add_ps(dy[0][c], dy[1][c]);
      t[2][c] = _mm512_sub_ps(dy[0][c], dy[1][c]);
      t[3][c] = negate(dy[1][c]);
    }
    for (int i = 0; i < 4; ++i) {  // (A dy) A^T, along the rows
      float* wi = w + i * 4 * plane + tx;  // 8 lanes stored whatever tx1 is: kRowSlack
      _mm256_storeu_ps(wi, low8(t[i][0]));
      _mm256_storeu_ps(wi + plane, low8(_mm512_add_ps(t[i][0], t[i][1])));
      _mm256_storeu_ps(wi + 2 * plane, low8(_mm512_sub_ps(t[i][0], t[i][1])));
      _mm256_storeu_ps(wi + 3 * plane, low8(negate(t[i][1])));
    }
  }
}
#endif

std::atomic<bool>& use_avx512() {
  static std::atomic<bool> on{[] {
#if EMBER_WINOGRAD_X86
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512vl;
#else
    return false;
#endif
  }()};
  return on;
}

// The step-1 transforms' walk: row(src_plane, tile_row, dst, plane) for every channel plane of
// src (`channels` planes of `plane_elems` per image) and every tile row of the block, the
// channel's planes in order (front to back in memory); dst points at the channel's row of the 16
// transformed planes (row_ld(count) apart, `plane` apart).
template <typename T, typename Row>
void transform_planes(const Problem& p, const T* src, int64_t channels, int64_t plane_elems, int64_t first_tile,
                      int64_t count, float* dst, const Row& row) {
  const int64_t ld = row_ld(count), plane = channels * ld + kPlanePad;
  const std::vector<TileRow> rows = tile_rows(p, first_tile, count);
  for (int64_t c = 0; c < channels; ++c)
    for (const TileRow& r : rows) row(src + (r.image * channels + c) * plane_elems, r, dst + c * ld + r.q - r.tx0, plane);
}

// Step 1: v[xi][c][q] = (B^T d B)[xi] for every channel c and tile q of the block.
template <typename T>
void input_transform(const Problem& p, const T* x, int64_t first_tile, int64_t count, float* v) {
  [[maybe_unused]] const bool wide = use_avx512().load(std::memory_order_relaxed);
  transform_planes(p, x, p.C, p.h * p.w, first_tile, count, v,
                   [&](const T* xc, const TileRow& r, float* vc, int64_t plane) {
#if EMBER_WINOGRAD_X86
                     if (wide) return input_row_avx512(p, xc, r.ty, r.tx0, r.tx1, vc, plane);
#endif
                     input_row_portable(p, xc, r.ty, r.tx0, r.tx1, vc, plane);
                   });
}

// Step 3: y's 2x2 output tiles from m[xi][k][q] (A^T m A), plus bias. Each plane of m has
// m_rows >= K rows of row_ld(count) floats (the rows past K are not read).
template <typename T>
void output_transform(const Problem& p, const float* m, int64_t m_rows, const float* bias, int64_t first_tile,
                      int64_t count, T* y) {
  const int64_t ld = row_ld(count), plane = m_rows * ld + kPlanePad;
#if EMBER_WINOGRAD_X86
  if (use_avx512().load(std::memory_order_relaxed)) {
    // The segments of every group of 16 tiles, found once for all K output channels.
    const int64_t groups = (count + 15) / 16;
    std::vector<Segment> segments;
    std::vector<int64_t> first(groups + 1);
    for (int64_t gi = 0; gi < groups; ++gi) {
      first[gi] = static_cast<int64_t>(segments.size());
      const int64_t q0 = gi * 16;
      for_each_tile_row(p, first_tile + q0, std::min<int64_t>(16, count - q0),
                        [&](int64_t image, int64_t ty, int64_t tx0, int64_t tx1, int64_t q) {
                          segments.push_back({image, ty, tx0, q, q + (tx1 - tx0)});
                        });
    }
    first[groups] = static_cast<int64_t>(segments.size());
    const int64_t image_stride = p.K * p.oh * p.ow;
    for (int64_t k = 0; k < p.K; ++k) {
      const float add = bias ? bias[k] : 0.0f;
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* mi[16];
        for (int xi = 0; xi < 16; ++xi) mi[xi] = m + xi * plane + k * ld + gi * 16;
        output_group_avx512(p, mi, std::min<int64_t>(16, count - gi * 16), segments.data() + first[gi],
                            first[gi + 1] - first[gi], add, y + k * p.oh * p.ow, image_stride);
      }
    }
    return;
  }
#endif
  const std::vector<TileRow> rows = tile_rows(p, first_tile, count);
  for (int64_t k = 0; k < p.K; ++k)
    for (const TileRow& r : rows) {
      const float* mi[16];
      for (int xi = 0; xi < 16; ++xi) mi[xi] = m + xi * plane + k * ld + r.q - r.tx0;
      output_row_portable(p, mi, r.ty, r.tx0, r.tx1, bias ? bias[k] : 0.0f, y + (r.image * p.K + k) * p.oh * p.ow);
    }
}

// The weight gradient's step 1 for dy: w[xi][k][q] = (A dy A^T)[xi] for every output channel k
// and tile q of the block.
template <typename T>
void grad_transform(const Problem& p, const T* gy, int64_t first_tile, int64_t count, float* w) {
  [[maybe_unused]] const bool wide = use_avx512().load(std::memory_order_relaxed);
  transform_planes(p, gy, p.K, p.oh * p.ow, first_tile, count, w,
                   [&](const T* gk, const TileRow& r, float* wk, int64_t plane) {
#if EMBER_WINOGRAD_X86
                     if (wide) return grad_row_avx512(p, gk, r.ty, r.tx0, r.tx1, wk, plane);
#endif
                     grad_row_portable(p, gk, r.ty, r.tx0, r.tx1, wk, plane);
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
};

#if EMBER_WINOGRAD_X86
// U's bf16 pairs straight from the filters, without U in float32 (16 K C floats written, read
// back, rounded and packed: at 512 x 512 that traffic was most of the transform's time). Filter
// row k, channels eight at a time as transform_filters8 computes them: each plane's eight values
// are rounded as BFloat16(float) rounds (bf16_bits16) and narrowed into four pair words, stored
// at the sliver position pack_u_pairs gives them: the same words. The last channels (C % 8) and
// the padding rows of the last sliver are done one at a time.
template <typename Filter>
EMBER_AVX512_TARGET void pair_filter_row(int64_t K, int64_t C, int64_t k, const Filter& filter, uint32_t* up) {
  const int64_t c2 = (C + 1) / 2, slivers = pair_rows_padded(K) / kPairRows;
  uint32_t* row = up + (k / kPairRows) * c2 * kPairRows + k % kPairRows;  // + (xi slivers c2 + cp) kPairRows
  auto word = [&](int xi, int64_t cp) -> uint32_t& { return row[(xi * slivers * c2 + cp) * kPairRows]; };
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
Scratch<uint32_t> transform_weight_pairs(int64_t K, int64_t C, const Filter& filter) {
  const int64_t c2 = (C + 1) / 2, slivers = pair_rows_padded(K) / kPairRows;
  Scratch<uint32_t> up = scratch<uint32_t>(16 * slivers * c2 * kPairRows);
  for (int64_t xi = 0; xi < 16; ++xi)  // the last sliver's rows past K are zeros
    for (int64_t cp = 0; cp < c2; ++cp)
      for (int64_t r = K - (slivers - 1) * kPairRows; r < kPairRows; ++r)
        up[((xi * slivers + slivers - 1) * c2 + cp) * kPairRows + r] = 0;
  parallel_for(0, K, filter_grain(C), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) pair_filter_row(K, C, k, filter, up.get());
  });
  return up;
}
#endif

// The weights for step 2 from filter (Filter: transform_weights's): U's bf16 pairs for a bf16
// convolution with bf16 products (straight from the filters with the AVX-512 transforms, else
// through U in float32), U in float32 otherwise.
template <typename T, typename Filter>
TransformedWeights transformed_weights(int64_t K, int64_t C, const Filter& filter) {
  TransformedWeights wt;
#if EMBER_WINOGRAD_X86
  if constexpr (std::is_same_v<T, BFloat16>)
    if (bf16_products_on().load(std::memory_order_relaxed)) {
      if (use_avx512().load(std::memory_order_relaxed)) {
        wt.up = transform_weight_pairs(K, C, filter);
      } else {
        const Scratch<float> u = scratch<float>(16 * K * C);
        transform_weights(K, C, filter, u.get());
        wt.up = pack_u_pairs(K, C, u.get());
      }
      return wt;
    }
#endif
  wt.u = scratch<float>(16 * K * C);
  transform_weights(K, C, filter, wt.u.get());
  return wt;
}

template <typename T>
void run_pairs(const Problem& p, const T* x, const uint32_t* up, const float* bias, T* y) {
  const int64_t k_rows = pair_rows_padded(p.K), slivers = k_rows / kPairRows, c2 = (p.C + 1) / 2;
  const ImageSplit s = split_images(p.n);
  const int64_t block = tile_block(p.C, p.K, p.n * p.tiles);
  const int64_t v_elems = 16 * (p.C * row_ld(block) + kPlanePad), m_elems = 16 * (k_rows * row_ld(block) + kPlanePad);
  const int64_t vp_elems = c2 * row_ld(block);
  auto v_all = scratch<float>(s.parts * v_elems);
  auto m_all = scratch<float>(s.parts * m_elems);
  auto vp_all = scratch<uint32_t>(s.parts * vp_elems);
  run_parts(s, p.n, [&](int64_t part, int64_t lo, int64_t hi) {
    float* v = v_all.get() + part * v_elems;
    float* m = m_all.get() + part * m_elems;
    uint32_t* vp = vp_all.get() + part * vp_elems;
    for (int64_t t = lo * p.tiles; t < hi * p.tiles; t += block) {
      const int64_t count = std::min(block, hi * p.tiles - t);
      const int64_t ld = row_ld(count), cols = (count + 15) / 16 * 16;  // cols <= ld: kRowSlack
      input_transform(p, x, t, count, v);
      for (int xi = 0; xi < 16; ++xi) {
        pair_channels(v + xi * (p.C * ld + kPlanePad), p.C, ld, cols, vp);
        // M[xi] (K rounded up to 8 rows, cols) = U[xi] @ V[xi] on the pairs.
        pair_product_packed(slivers, c2, up + xi * slivers * c2 * kPairRows, c2 * kPairRows, 0, vp, ld,
                           cols, m + xi * (k_rows * ld + kPlanePad), ld, false);
      }
      output_transform(p, m, k_rows, bias, t, count, y);
    }
  });
  winograd_count.fetch_add(1, std::memory_order_relaxed);
}

// run_weight() with step 2 on bf16 pairs: dU[xi] (K x C) = sum over tiles W[xi] V[xi]^T, the
// planes transformed as float32 does it, then W in tile order and V transposed, both as pairs of
// tiles; each part sums into its own padded f32 dU, the parts added in part order.
template <typename T>
DuParts run_weight_pairs(const Problem& p, const T* x, const T* gy, Scratch<float>& store) {
  const int64_t k_rows = pair_rows_padded(p.K), slivers = k_rows / kPairRows, cpad = (p.C + 15) / 16 * 16;
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
      std::fill(wn + p.K * np, wn + k_rows * np, 0u);  // the padding rows of the last sliver
      for (int xi = 0; xi < 16; ++xi) {
        pair_tiles(w + xi * (p.K * ld + kPlanePad), p.K, ld, count, np, wn);
        pair_tiles_transposed(v + xi * (p.C * ld + kPlanePad), p.C, ld, count, np, cpad, vt);
        pair_product_rows(slivers, np, wn, kPairRows * np, np, vt, cpad, cpad, acc + xi * k_rows * cpad, cpad,
                            t != lo * p.tiles);
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
    if (wt.up) return run_pairs(p, x, wt.up.get(), bias, y);
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
DuParts run_weight(const Problem& p, const T* x, const T* gy, Scratch<float>& store) {
#if EMBER_WINOGRAD_X86
  if constexpr (std::is_same_v<T, BFloat16>)
    if (bf16_products_on().load(std::memory_order_relaxed)) return run_weight_pairs(p, x, gy, store);
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

Conv3x3Path conv3x3_path() { return static_cast<Conv3x3Path>(chosen_path().load(std::memory_order_relaxed)); }

void set_conv3x3_path(Conv3x3Path path) { chosen_path().store(static_cast<int>(path), std::memory_order_relaxed); }

const char* conv3x3_path_name(Conv3x3Path path) {
  switch (path) {
    case Conv3x3Path::automatic: return "winograd F(2x2,3x3) where it pays";
    case Conv3x3Path::winograd: return "winograd F(2x2,3x3)";
    case Conv3x3Path::im2col: return "im2col + GEMM";
  }
  return "?";
}

bool winograd_applies(const Conv2dGeometry& g, bool backward_data, bool bf16) {
  const Conv3x3Path path = conv3x3_path();
  // The same geometric conditions for both passes: padding <= 2 keeps the input gradient's 2 - p >= 0.
  const bool fits = path != Conv3x3Path::im2col && g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 &&
                    g.dil_h == 1 && g.dil_w == 1 && g.groups == 1 && g.pad_h >= 0 && g.pad_h <= 2 &&
                    g.pad_w >= 0 && g.pad_w <= 2 && g.out_h >= 1 && g.out_w >= 1 && g.n >= 1 &&
                    g.c_in >= kMinChannels && g.c_out >= kMinChannels;
  if (!fits) return false;
  if (path == Conv3x3Path::automatic && bf16 && winograd_bf16_products())  // Note [When bf16 Winograd pays]
    return call_tiles(g, backward_data) >= kMinBf16Tiles;
  return true;
}

int64_t winograd_convolutions() { return winograd_count.load(std::memory_order_relaxed); }

std::string conv3x3_description() {
  const Conv3x3Path path = conv3x3_path();
  if (path == Conv3x3Path::im2col) return std::string(conv3x3_path_name(Conv3x3Path::im2col)) + " (EMBER_CPU_CONV=im2col)";
  const bool bf16_pairs = winograd_bf16_products();
  const std::string bf16_from = bf16_pairs && path == Conv3x3Path::automatic
                                    ? ", bf16 from " + std::to_string(kMinBf16Tiles) + " tiles per call"
                                    : "";
  return std::string(conv3x3_path_name(Conv3x3Path::winograd)) + " (" +
         (winograd_vectorized() ? "AVX-512" : "portable") + " transforms; f32 and bf16, stride 1, >= " +
         std::to_string(kMinChannels) + " channels" + bf16_from + "; bf16 products " +
         (bf16_pairs ? "on bf16 pairs (VDPBF16PS)" : "in float32") + "; im2col + GEMM otherwise)" +
         (path == Conv3x3Path::winograd ? " (EMBER_CPU_CONV=winograd)" : "");
}

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
void forward_impl(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const Problem p = make_problem(g.n, g.c_in, g.h, g.w, g.c_out, g.pad_h, g.pad_w);
  const TransformedWeights wt = transformed_weights<T>(p.K, p.C, [&](int64_t k, int64_t c) {
    std::array<double, 9> f;
    for (int i = 0; i < 9; ++i) f[i] = static_cast<float>(w[(k * g.c_in + c) * 9 + i]);
    return f;
  });
  std::vector<float> b;  // the bias as float32 (added before the output's one rounding)
  if (bias)
    for (int64_t k = 0; k < g.c_out; ++k) b.push_back(static_cast<float>(bias[k]));
  run(p, x, wt, bias ? b.data() : nullptr, y);
}

template <typename T>
void backward_data_impl(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  // dx = conv2d(dy, w') with padding 2 - p: C = c_out channels in, K = c_in out, and
  // w'[c_in][c_out] = w[c_out][c_in] rotated by 180 degrees.
  const Problem p = make_problem(g.n, g.c_out, g.out_h, g.out_w, g.c_in, 2 - g.pad_h, 2 - g.pad_w);
  const TransformedWeights wt = transformed_weights<T>(p.K, p.C, [&](int64_t k, int64_t c) {
    std::array<double, 9> f;
    for (int i = 0; i < 9; ++i) f[i] = static_cast<float>(w[(c * g.c_in + k) * 9 + 8 - i]);
    return f;
  });
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
void backward_weight_impl(const Conv2dGeometry& g, const T* gy, const T* x, T* gw) {
  const Problem p = make_problem(g.n, g.c_in, g.h, g.w, g.c_out, g.pad_h, g.pad_w);
  Scratch<float> store;
  const DuParts du = run_weight(p, x, gy, store);
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

void winograd_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward_impl(g, x, w, bias, y);
}
void winograd_forward(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                      BFloat16* y) {
  forward_impl(g, x, w, bias, y);
}
void winograd_backward_data(const Conv2dGeometry& g, const float* gy, const float* w, float* gx) {
  backward_data_impl(g, gy, w, gx);
}
void winograd_backward_data(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w, BFloat16* gx) {
  backward_data_impl(g, gy, w, gx);
}
void winograd_backward_weight(const Conv2dGeometry& g, const float* gy, const float* x, float* gw) {
  backward_weight_impl(g, gy, x, gw);
}
void winograd_backward_weight(const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x, BFloat16* gw) {
  backward_weight_impl(g, gy, x, gw);
}

}  // namespace ember::kernels::cpu
