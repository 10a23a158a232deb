// Direct bf16 convolution on AMX tiles (conv_amx.h).
//
// Note [Direct convolution on AMX tiles]
// With AMX the products of a convolution cost little; what im2col + GEMM and Winograd add around
// them — im2col's copy of every input k^2 times, Winograd's transforms — is most of their time.
// A stride-1 convolution can feed the tiles straight from the input instead:
//
//   Pair planes: each image's channels are interleaved in pairs, xp[cp][p] = (x[2 cp][p],
//     x[2 cp + 1][p]), over the *padded* plane (hp = h + 2 pad_h rows of wp = w + 2 pad_w
//     columns, zeros in the border), the planes S words apart. A pair row is exactly what a B
//     tile row holds: 16 pixels of one channel pair.
//   Outputs on the padded grid: output (oy, ox) reads padded pixel (oy + i, ox + j) for tap
//     (i, j), so with outputs numbered on the padded grid too, L = oy wp + ox, the input of tap
//     (i, j) is L + i wp + j — for every L. Sixteen consecutive outputs of any tap are then
//     sixteen consecutive words of each pair plane: one B tile (16 channel pairs by 16 outputs)
//     is one TILELOADD from xp + L0 + i wp + j with the planes' stride, no copy. The grid's
//     columns ox >= out_w (kw - 1 per row) are computed and dropped: 2 of 9 columns at ResNet's
//     layer4 (7 x 7), 2 of 16 in the cnn model, 2 of 58 at layer1.
//   Weights: for each tap, A tiles of 16 output channels by 16 input channel pairs, packed once
//     per call, wk[tap][k][cp].
//   The loop: 32 output channels by 32 outputs in four accumulator tiles, summed over the taps
//     and the channel pairs 16 at a time (two A and two B tiles, four TDPBF16PS per step), then
//     stored into an f32 grid (K x L) from which the valid columns are taken, the bias added and
//     each output rounded to bf16 once.
// The input gradient of a stride-1 convolution is the convolution of dy with the flipped,
// channel-swapped filter and padding k - 1 - pad (the argument of Note [Winograd convolution]),
// so it is the same loop with other weights. The weight gradient sums over the outputs instead,
// so its pairs run along the grid: dy's rows on the grid are A tiles as they lie, x's padded
// planes are transposed into pairs of grid positions by channels (below, weight_grid). Images are
// spread over the threads (conv_parts.h), each with its own pair planes and grid (the weight
// gradient: its own float32 sums, added in part order). The sums are float32 in the tiles' order (Note [AMX tiles and their emulator]), so results
// agree with im2col + GEMM's to f32 rounding; tests/test_conv_amx.cpp holds them to the direct
// reference on the emulator everywhere and, on a CPU with AMX, the hardware to the emulator's bits.

#include "conv_amx.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "../../../core/error.h"
#include "../conv_parts.h"
#include "bf16_convert.h"

#if EMBER_AMX_TILES
#include "bf16_simd.h"
#endif

namespace ember::kernels::cpu {

namespace {

using conv_detail::ImageSplit;
using conv_detail::run_parts;
using conv_detail::split_images;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// One direct convolution: y (n, K, oh, ow) from x (n, C, h, w) padded by (pad_h, pad_w) with a
// kh x kw filter, stride 1; the sizes of its pair planes and output grid.
struct Direct {
  int64_t n, C, h, w, K, kh, kw, pad_h, pad_w;
  int64_t hp, wp, oh, ow;  // the padded plane and the output
  int64_t c2p, k_pad;      // channel pairs padded to 16 (whole B tile rows), outputs padded to 32
  int64_t grid, stride;    // outputs on the padded grid (a multiple of 32), words between pair planes
};

Direct make_direct(int64_t n, int64_t C, int64_t h, int64_t w, int64_t K, int64_t kh, int64_t kw, int64_t pad_h,
                   int64_t pad_w) {
  Direct d{n, C, h, w, K, kh, kw, pad_h, pad_w, 0, 0, 0, 0, 0, 0, 0, 0};
  d.hp = h + 2 * pad_h, d.wp = w + 2 * pad_w;
  d.oh = d.hp - kh + 1, d.ow = d.wp - kw + 1;
  d.c2p = round_up((C + 1) / 2, 16), d.k_pad = round_up(K, 32);
  d.grid = round_up(d.oh * d.wp, 32);
  // The last grid block's last tap reads grid - 1 + (kh - 1) wp + kw - 1: the planes reach past it.
  d.stride = round_up(std::max(d.grid + (kh - 1) * d.wp + kw - 1, d.hp * d.wp), 16);
  return d;
}

uint32_t pair_of(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

// wk[(tap k_pad + k) c2p + cp] = (filter(k, 2 cp, tap), filter(k, 2 cp + 1, tap)), zeros past K and C.
template <typename Filter>
std::vector<uint32_t> pack_filters(const Direct& d, const Filter& filter) {
  std::vector<uint32_t> wk(static_cast<size_t>(d.kh * d.kw * d.k_pad * d.c2p), 0u);
  for (int64_t t = 0; t < d.kh * d.kw; ++t)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t cp = 0; cp < (d.C + 1) / 2; ++cp) {
        const uint16_t lo = filter(k, 2 * cp, t / d.kw, t % d.kw);
        const uint16_t hi = 2 * cp + 1 < d.C ? filter(k, 2 * cp + 1, t / d.kw, t % d.kw) : uint16_t{0};
        wk[(t * d.k_pad + k) * d.c2p + cp] = pair_of(lo, hi);
      }
  return wk;
}

// One image's pair planes: xp[cp stride + (y + pad_h) wp + x + pad_w] = (x[2 cp][y][x], x[2 cp +
// 1][y][x]), zeros in the border, past the planes and in the channel pairs past C.
void pair_planes_plain(const Direct& d, const BFloat16* x, uint32_t* xp) {
  std::fill(xp, xp + d.c2p * d.stride, 0u);
  for (int64_t cp = 0; cp < (d.C + 1) / 2; ++cp) {
    const BFloat16* r0 = x + 2 * cp * d.h * d.w;
    const BFloat16* r1 = 2 * cp + 1 < d.C ? r0 + d.h * d.w : nullptr;
    for (int64_t y = 0; y < d.h; ++y)
      for (int64_t c = 0; c < d.w; ++c)
        xp[cp * d.stride + (y + d.pad_h) * d.wp + c + d.pad_w] =
            pair_of(r0[y * d.w + c].bits, r1 ? r1[y * d.w + c].bits : uint16_t{0});
  }
}

#if EMBER_AMX_TILES
// pair_planes_plain 16 pixels at a time: the two rows widened (VPMOVZXWD), the second shifted into
// the high halves.
EMBER_BF16_SIMD_TARGET void pair_planes_avx512(const Direct& d, const BFloat16* x, uint32_t* xp) {
  std::fill(xp, xp + d.c2p * d.stride, 0u);
  for (int64_t cp = 0; cp < (d.C + 1) / 2; ++cp) {
    const BFloat16* r0 = x + 2 * cp * d.h * d.w;
    const BFloat16* r1 = 2 * cp + 1 < d.C ? r0 + d.h * d.w : nullptr;
    for (int64_t y = 0; y < d.h; ++y) {
      uint32_t* dst = xp + cp * d.stride + (y + d.pad_h) * d.wp + d.pad_w;
      for (int64_t c = 0; c < d.w; c += 16) {
        const __mmask16 m = static_cast<__mmask16>((1u << std::min<int64_t>(16, d.w - c)) - 1u);
        const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + y * d.w + c));
        const __m512i hi =
            r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + y * d.w + c)) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(dst + c, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
  }
}
#endif

// The grid (k_pad x grid floats) of one image: outputs (k, L) = sum over taps and channel pairs.
template <class Tiles>
void direct_grid(const Direct& d, const uint32_t* wk, const uint32_t* xp, float* grid) {
  TileConfig config;
  for (TileShape& t : config.tile) t = {kTileRows, kTileRowBytes};
  const int64_t as = d.c2p * 4, bs = d.stride * 4, cs = d.grid * 4, taps = d.kh * d.kw;
  Tiles::configure(config);
  for (int64_t k0 = 0; k0 < d.k_pad; k0 += 32)
    for (int64_t l0 = 0; l0 < d.grid; l0 += 32) {
      Tiles::template zero<0>();
      Tiles::template zero<1>();
      Tiles::template zero<2>();
      Tiles::template zero<3>();
      for (int64_t t = 0; t < taps; ++t) {
        const uint32_t* a = wk + (t * d.k_pad + k0) * d.c2p;
        const uint32_t* b = xp + l0 + (t / d.kw) * d.wp + t % d.kw;
        for (int64_t cp = 0; cp < d.c2p; cp += 16) {
          Tiles::template load<4>(a + cp, as);
          Tiles::template load<6>(b + cp * d.stride, bs);
          Tiles::template dot<0, 4, 6>();
          Tiles::template load<7>(b + cp * d.stride + 16, bs);
          Tiles::template dot<1, 4, 7>();
          Tiles::template load<5>(a + 16 * d.c2p + cp, as);
          Tiles::template dot<2, 5, 6>();
          Tiles::template dot<3, 5, 7>();
        }
      }
      float* c = grid + k0 * d.grid + l0;
      Tiles::template store<0>(c, cs);
      Tiles::template store<1>(c + 16, cs);
      Tiles::template store<2>(c + 16 * d.grid, cs);
      Tiles::template store<3>(c + 16 * d.grid + 16, cs);
    }
  Tiles::release();
}

// y (n, K, oh, ow) from x (n, C, h, w): each image's pair planes, its grid, the valid outputs
// plus bias (may be null), rounded to bf16.
template <class Tiles>
void direct_run(const Direct& d, const std::vector<uint32_t>& wk, const BFloat16* x, const float* bias, BFloat16* y) {
  const ImageSplit s = split_images(d.n);
  auto planes = scratch<uint32_t>(s.parts * d.c2p * d.stride);
  auto grids = scratch<float>(s.parts * d.k_pad * d.grid);
  run_parts(s, d.n, [&](int64_t part, int64_t lo, int64_t hi) {
    uint32_t* xp = planes.get() + part * d.c2p * d.stride;
    float* grid = grids.get() + part * d.k_pad * d.grid;
    for (int64_t img = lo; img < hi; ++img) {
      const BFloat16* xi = x + img * d.C * d.h * d.w;
#if EMBER_AMX_TILES
      if constexpr (std::is_same_v<Tiles, HardwareTiles>) pair_planes_avx512(d, xi, xp);
      else pair_planes_plain(d, xi, xp);
#else
      pair_planes_plain(d, xi, xp);
#endif
      direct_grid<Tiles>(d, wk.data(), xp, grid);
      BFloat16* yi = y + img * d.K * d.oh * d.ow;
      for (int64_t k = 0; k < d.K; ++k)
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          float* row = grid + k * d.grid + oy * d.wp;
          if (bias)
            for (int64_t ox = 0; ox < d.ow; ++ox) row[ox] += bias[k];
          f32_to_bf16(row, yi + (k * d.oh + oy) * d.ow, d.ow);
        }
    }
  });
}

template <typename Filter>
void direct(AmxTiles tiles, const Direct& d, const Filter& filter, const BFloat16* x, const float* bias, BFloat16* y) {
  const std::vector<uint32_t> wk = pack_filters(d, filter);
  if (tiles == AmxTiles::emulated) return direct_run<EmulatedTiles>(d, wk, x, bias, y);
#if EMBER_AMX_TILES
  if (tiles == AmxTiles::hardware) return direct_run<HardwareTiles>(d, wk, x, bias, y);
#endif
  EMBER_THROW("conv2d: the direct AMX convolution was called with tiles ", amx_tiles_name(tiles));
}


// ---- the weight gradient --------------------------------------------------------------------------
//
// dW[k][c][i][j] = sum over images and grid outputs L of dyg[k][L] * xpad[c][L + i wp + j], dyg
// being dy on the padded grid (zeros in the dropped columns). The sum runs over L, so both
// operands need pairs of consecutive L: dy's rows are that already (an A tile is 16 rows of dyg,
// 32 consecutive L each); for x, a B tile is 16 pairs of L by 16 channels, a transpose of the
// padded planes: xt[q][c] = (xpad[c][2 q + par], xpad[c][2 q + 1 + par]), built once per image for
// each parity par of a tap's offset (odd offsets start a pair one value later). The taps' dW
// (k x c) accumulate in float32 tiles over L and over the images of a part; the parts are added
// in order and each weight rounded once.

struct WeightBuffers {
  int64_t plane;  // bf16 values per padded plane (a multiple of 32, past the grid's last read)
  int64_t c_pad;  // channels padded to 32
};

WeightBuffers weight_buffers(const Direct& d) {
  return {round_up(d.stride * 2, 32), round_up(d.C, 32)};
}

// One image's padded bf16 planes xb[c][p] (zeros past C), dy on the grid dyg[k][L] (zeros past K
// and in the dropped columns).
void weight_planes(const Direct& d, const WeightBuffers& wb, const BFloat16* x, const BFloat16* dy, BFloat16* xb,
                   BFloat16* dyg) {
  std::fill(xb, xb + wb.c_pad * wb.plane, BFloat16{});
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t y = 0; y < d.h; ++y)
      std::copy(x + (c * d.h + y) * d.w, x + (c * d.h + y + 1) * d.w, xb + c * wb.plane + (y + d.pad_h) * d.wp + d.pad_w);
  std::fill(dyg, dyg + d.k_pad * d.grid, BFloat16{});
  for (int64_t k = 0; k < d.K; ++k)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      std::copy(dy + (k * d.oh + oy) * d.ow, dy + (k * d.oh + oy + 1) * d.ow, dyg + k * d.grid + oy * d.wp);
}

// xt[q c_pad + c] = the 32-bit word at bf16 offset 2 q + par of plane c: a transpose of the planes
// viewed as words.
void transpose_pairs_plain(const WeightBuffers& wb, const BFloat16* xb, int64_t par, uint32_t* xt) {
  const int64_t words = wb.plane / 2 - 1;
  for (int64_t c = 0; c < wb.c_pad; ++c)
    for (int64_t q = 0; q < words; ++q)
      xt[q * wb.c_pad + c] = pair_of(xb[c * wb.plane + 2 * q + par].bits, xb[c * wb.plane + 2 * q + 1 + par].bits);
}

#if EMBER_AMX_TILES
// transpose_pairs_plain by 16 x 16 blocks of words (transpose16).
EMBER_BF16_SIMD_TARGET void transpose_pairs_avx512(const WeightBuffers& wb, const BFloat16* xb, int64_t par,
                                                   uint32_t* xt) {
  const int64_t words = wb.plane / 2 - 1;
  for (int64_t c0 = 0; c0 < wb.c_pad; c0 += 16)
    for (int64_t q0 = 0; q0 < words; q0 += 16) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::min<int64_t>(16, words - q0)) - 1u);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_epi32(m, xb + (c0 + i) * wb.plane + 2 * q0 + par);
      transpose16(r);
      for (int i = 0; i < 16 && q0 + i < words; ++i) _mm512_storeu_si512(xt + (q0 + i) * wb.c_pad + c0, r[i]);
    }
}
#endif

// acc[(t k_pad + k) c_pad + c] (+)= one image's dW of tap t.
template <class Tiles>
void weight_grid(const Direct& d, const WeightBuffers& wb, const BFloat16* dyg, const uint32_t* const xt[2],
                 float* acc, bool first) {
  TileConfig config;
  for (TileShape& t : config.tile) t = {kTileRows, kTileRowBytes};
  const int64_t as = d.grid * 2, bs = wb.c_pad * 4, cs = wb.c_pad * 4;
  Tiles::configure(config);
  for (int64_t t = 0; t < d.kh * d.kw; ++t) {
    const int64_t off = (t / d.kw) * d.wp + t % d.kw, par = off & 1;
    const uint32_t* b_tap = xt[par] + ((off - par) / 2) * wb.c_pad;
    for (int64_t k0 = 0; k0 < d.k_pad; k0 += 32)
      for (int64_t c0 = 0; c0 < wb.c_pad; c0 += 32) {
        float* c = acc + (t * d.k_pad + k0) * wb.c_pad + c0;
        if (first) {
          Tiles::template zero<0>();
          Tiles::template zero<1>();
          Tiles::template zero<2>();
          Tiles::template zero<3>();
        } else {
          Tiles::template load<0>(c, cs);
          Tiles::template load<1>(c + 16, cs);
          Tiles::template load<2>(c + 16 * wb.c_pad, cs);
          Tiles::template load<3>(c + 16 * wb.c_pad + 16, cs);
        }
        for (int64_t l0 = 0; l0 < d.grid; l0 += 32) {
          const BFloat16* a = dyg + k0 * d.grid + l0;
          const uint32_t* b = b_tap + (l0 / 2) * wb.c_pad + c0;
          Tiles::template load<4>(a, as);
          Tiles::template load<6>(b, bs);
          Tiles::template dot<0, 4, 6>();
          Tiles::template load<7>(b + 16, bs);
          Tiles::template dot<1, 4, 7>();
          Tiles::template load<5>(a + 16 * d.grid, as);
          Tiles::template dot<2, 5, 6>();
          Tiles::template dot<3, 5, 7>();
        }
        Tiles::template store<0>(c, cs);
        Tiles::template store<1>(c + 16, cs);
        Tiles::template store<2>(c + 16 * wb.c_pad, cs);
        Tiles::template store<3>(c + 16 * wb.c_pad + 16, cs);
      }
  }
  Tiles::release();
}

template <class Tiles>
void weight_run(const Direct& d, const BFloat16* x, const BFloat16* dy, BFloat16* gw) {
  const WeightBuffers wb = weight_buffers(d);
  const int64_t taps = d.kh * d.kw, acc_elems = taps * d.k_pad * wb.c_pad, words = wb.plane / 2;
  const ImageSplit s = split_images(d.n);
  auto xb_all = scratch<BFloat16>(s.parts * wb.c_pad * wb.plane);
  auto dyg_all = scratch<BFloat16>(s.parts * d.k_pad * d.grid);
  auto xt_all = scratch<uint32_t>(s.parts * 2 * words * wb.c_pad);
  auto acc_all = scratch<float>(s.parts * acc_elems);
  run_parts(s, d.n, [&](int64_t part, int64_t lo, int64_t hi) {
    BFloat16* xb = xb_all.get() + part * wb.c_pad * wb.plane;
    BFloat16* dyg = dyg_all.get() + part * d.k_pad * d.grid;
    const uint32_t* xt[2] = {xt_all.get() + part * 2 * words * wb.c_pad,
                             xt_all.get() + (part * 2 + 1) * words * wb.c_pad};
    float* acc = acc_all.get() + part * acc_elems;
    if (lo == hi) std::fill(acc, acc + acc_elems, 0.0f);
    for (int64_t img = lo; img < hi; ++img) {
      weight_planes(d, wb, x + img * d.C * d.h * d.w, dy + img * d.K * d.oh * d.ow, xb, dyg);
      for (int64_t par = 0; par < 2; ++par) {
        uint32_t* dst = const_cast<uint32_t*>(xt[par]);
#if EMBER_AMX_TILES
        if constexpr (std::is_same_v<Tiles, HardwareTiles>) transpose_pairs_avx512(wb, xb, par, dst);
        else transpose_pairs_plain(wb, xb, par, dst);
#else
        transpose_pairs_plain(wb, xb, par, dst);
#endif
      }
      weight_grid<Tiles>(d, wb, dyg, xt, acc, img == lo);
    }
  });
  // The parts added in part order, then gw[k][c][i][j] rounded once.
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t c = 0; c < d.C; ++c) {
        const int64_t e = (t * d.k_pad + k) * wb.c_pad + c;
        float v = acc_all[e];
        for (int64_t p = 1; p < s.parts; ++p) v += acc_all[p * acc_elems + e];
        gw[(k * d.C + c) * taps + t] = BFloat16(v);
      }
}

}  // namespace

bool amx_conv_applies(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1 && g.groups == 1 && g.pad_h >= 0 &&
         g.pad_w >= 0 && g.pad_h <= g.kh - 1 && g.pad_w <= g.kw - 1 && g.out_h >= 1 && g.out_w >= 1 && g.n >= 1 &&
         g.c_in >= 1 && g.c_out >= 1;
}

void amx_conv_forward(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* y) {
  EMBER_CHECK(amx_conv_applies(g), "conv2d: the direct AMX convolution does not cover this geometry");
  const Direct d = make_direct(g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.pad_h, g.pad_w);
  std::vector<float> b;  // the bias as float32 (added before the output's one rounding)
  if (bias)
    for (int64_t k = 0; k < g.c_out; ++k) b.push_back(static_cast<float>(bias[k]));
  direct(
      tiles, d,
      [&](int64_t k, int64_t c, int64_t i, int64_t j) { return w[((k * g.c_in + c) * g.kh + i) * g.kw + j].bits; },
      x, bias ? b.data() : nullptr, y);
}

void amx_conv_backward_weight(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x,
                              BFloat16* gw) {
  EMBER_CHECK(amx_conv_applies(g), "conv2d: the direct AMX convolution does not cover this geometry");
  const Direct d = make_direct(g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.pad_h, g.pad_w);
  if (tiles == AmxTiles::emulated) return weight_run<EmulatedTiles>(d, x, gy, gw);
#if EMBER_AMX_TILES
  if (tiles == AmxTiles::hardware) return weight_run<HardwareTiles>(d, x, gy, gw);
#endif
  EMBER_THROW("conv2d: the direct AMX convolution was called with tiles ", amx_tiles_name(tiles));
}

void amx_conv_backward_data(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w,
                            BFloat16* gx) {
  EMBER_CHECK(amx_conv_applies(g), "conv2d: the direct AMX convolution does not cover this geometry");
  // dx = conv2d(dy, w') with padding k - 1 - p: C = c_out channels in, K = c_in out, and
  // w'[c_in][c_out] = w[c_out][c_in] rotated by 180 degrees.
  const Direct d = make_direct(g.n, g.c_out, g.out_h, g.out_w, g.c_in, g.kh, g.kw, g.kh - 1 - g.pad_h,
                               g.kw - 1 - g.pad_w);
  direct(
      tiles, d,
      [&](int64_t k, int64_t c, int64_t i, int64_t j) {
        return w[((c * g.c_in + k) * g.kh + (g.kh - 1 - i)) * g.kw + (g.kw - 1 - j)].bits;
      },
      gy, nullptr, gx);
}

}  // namespace ember::kernels::cpu
