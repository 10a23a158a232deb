// Winograd or im2col, per layer and pass (conv3x3_choice.h).
//
// Note [When bf16 Winograd pays]
// Winograd's products work on the weights transformed into 16 planes of K x C: every call
// transforms them (and, for the input gradient, the rotated filters), rounds them into bf16 pairs,
// and for the weight gradient transforms a float32 dU of 16 K x C planes back — work that grows
// with the weights, not with the batch, amortized over the call's tiles (2 x 2 outputs each). With
// few tiles — deep layers of small images, where K and C are large and the planes small — that
// work dominates, and im2col + GEMM, which has none of it, wins. Measured on a 2-vCPU AMD EPYC
// (Zen 4, 2026-12-05; bench_conv --dtype bfloat16 --products bf16, forward and both gradients, ms
// on 1 / 2 threads; the call's tiles):
//   4 x 512 x 7 x 7 -> 512    (64 tiles)     Winograd 26.2 / 14.9   im2col 17.6 / 9.9
//   2 x 256 x 14 x 14 -> 256  (98)           Winograd 6.9 / 4.0     im2col 8.6 / 4.4
//   8 x 512 x 7 x 7 -> 512    (128)          Winograd 33.7 / 20.0   im2col 35.4 / 18.8
//   8 x 256 x 14 x 14 -> 256  (392)          Winograd 18.6 / 12.4   im2col 33.6 / 20.4
// That crossover was a threshold (Winograd from 128 tiles per call) until the Intel Xeon with AMX
// moved it: there the bf16 GEMM runs on AMX tiles several times faster than VDPBF16PS, and
// im2col + GEMM beats Winograd on layers where Zen 4 had Winograd far ahead (tables in
// docs/benchmarks.md). Where the crossover lies depends on the processor, the dtype, the layer,
// the pass and the thread count, so under Conv3x3Path::automatic each (pass, dtype, geometry,
// threads) is measured the first time it is seen (Note [Kernels chosen by measurement] in
// measured_choice.cpp): the direct convolution on AMX tiles (bf16 where the CPU has them: Note
// [Direct convolution on AMX tiles] in conv_amx.cpp, which needs neither im2col's copies nor
// Winograd's transforms and won most of ResNet-18's layers on the Xeon), Winograd on bf16 pairs
// (bf16, where winograd_bf16_products()), Winograd on float32 planes, and im2col + GEMM, whose own
// products are measured per shape in turn. float32 measures Winograd against im2col the same way. Every candidate sums in float32 and rounds each
// result once; Winograd on bf16 pairs also rounds its transformed tiles (Note [bf16 Winograd
// products] in conv_winograd.cpp).

#include "conv3x3_choice.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../../core/cpu/parallel.h"
#include "../bf16/amx_tiles.h"
#include "../bf16/conv_amx.h"
#include "../bf16/gemm_bf16.h"
#include "../measured_choice.h"
#include "conv_winograd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ember::kernels::cpu {

namespace {

constexpr int64_t kMinChannels = 16;  // both C and K at least this: with fewer, the transforms are the work

Conv3x3Path default_path() {
  const char* env = std::getenv("EMBER_CPU_CONV");
  if (env && std::string(env) == "im2col") return Conv3x3Path::im2col;
  if (env && std::string(env) == "winograd") return Conv3x3Path::winograd;
  if (env && std::string(env) == "direct") return Conv3x3Path::direct_amx;
  return Conv3x3Path::automatic;
}

std::atomic<int>& chosen_path() {
  static std::atomic<int> path{static_cast<int>(default_path())};
  return path;
}

// What the bf16 pair products run on, for names: "amx" or "avx512_bf16".
const char* pair_engine_name() { return amx_tiles() != AmxTiles::off ? "amx" : "avx512_bf16"; }

// "forward bf16 8x64x56x56 -> 64, pad 1x1, 2 threads"
std::string shape_key(const Conv2dGeometry& g, ConvPass pass, DType dtype) {
  bool nested = false;
#ifdef _OPENMP
  nested = omp_in_parallel();
#endif
  const int threads = nested ? 1 : get_num_threads();
  const char* pass_name = pass == ConvPass::forward         ? "forward"
                          : pass == ConvPass::backward_data ? "backward-data"
                                                            : "backward-weight";
  const std::string kernel = g.kh == 3 && g.kw == 3 ? "" : ", " + std::to_string(g.kh) + "x" + std::to_string(g.kw);
  return std::string(pass_name) + " " + dtype_name(dtype) + " " + std::to_string(g.n) + "x" + std::to_string(g.c_in) +
         "x" + std::to_string(g.h) + "x" + std::to_string(g.w) + " -> " + std::to_string(g.c_out) + kernel + ", pad " +
         std::to_string(g.pad_h) + "x" + std::to_string(g.pad_w) + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

}  // namespace

Conv3x3Path conv3x3_path() { return static_cast<Conv3x3Path>(chosen_path().load(std::memory_order_relaxed)); }

void set_conv3x3_path(Conv3x3Path path) { chosen_path().store(static_cast<int>(path), std::memory_order_relaxed); }

const char* conv3x3_path_name(Conv3x3Path path) {
  switch (path) {
    case Conv3x3Path::automatic: return "measured per layer: winograd F(2x2,3x3), direct on AMX tiles or im2col + GEMM";
    case Conv3x3Path::winograd: return "winograd F(2x2,3x3)";
    case Conv3x3Path::im2col: return "im2col + GEMM";
    case Conv3x3Path::direct_amx: return "direct on AMX tiles";
  }
  return "?";
}

std::string conv3x3_description() {
  const Conv3x3Path path = conv3x3_path();
  if (path == Conv3x3Path::im2col) return std::string(conv3x3_path_name(path)) + " (EMBER_CPU_CONV=im2col)";
  if (path == Conv3x3Path::direct_amx)
    return std::string(conv3x3_path_name(path)) + " for bf16 stride-1 convolutions (EMBER_CPU_CONV=direct)";
  const std::string products = winograd_bf16_products()
                                   ? std::string("on bf16 pairs (") + pair_engine_name() + ")"
                                   : std::string("in float32");
  return std::string(conv3x3_path_name(path)) + " (winograd: " + (winograd_vectorized() ? "AVX-512" : "portable") +
         " transforms; f32 and bf16, 3x3 stride 1, >= " + std::to_string(kMinChannels) +
         " channels; bf16 products " + products + ")" +
         (path == Conv3x3Path::winograd ? " (EMBER_CPU_CONV=winograd)"
          : amx_tiles() == AmxTiles::hardware
              ? "; direct on AMX tiles: bf16 stride-1 convolutions"
              : "");
}

bool winograd_applies(const Conv2dGeometry& g) {
  // Padding <= 2 keeps the input gradient's padding 2 - p >= 0.
  const Conv3x3Path path = conv3x3_path();
  return (path == Conv3x3Path::automatic || path == Conv3x3Path::winograd) && g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.dil_h == 1 && g.dil_w == 1 && g.groups == 1 && g.pad_h >= 0 && g.pad_h <= 2 && g.pad_w >= 0 &&
         g.pad_w <= 2 && g.out_h >= 1 && g.out_w >= 1 && g.n >= 1 && g.c_in >= kMinChannels &&
         g.c_out >= kMinChannels;
}

void run_conv_pass(const Conv2dGeometry& g, ConvPass pass, DType dtype, const std::function<void(ConvAlgo)>& run) {
  const Conv3x3Path path = conv3x3_path();
  const ConvAlgo im2col{ConvAlgoKind::im2col, WinogradProducts::f32_planes};
  const ConvAlgo direct{ConvAlgoKind::direct_amx, WinogradProducts::f32_planes};
  const bool direct_fits = dtype == DType::bf16 && amx_conv_applies(g);
  if (path == Conv3x3Path::direct_amx) return run(direct_fits && amx_tiles() != AmxTiles::off ? direct : im2col);
  const bool pairs = dtype == DType::bf16 && winograd_bf16_products();
  const ConvAlgo on_pairs{ConvAlgoKind::winograd, WinogradProducts::bf16_pairs};
  const ConvAlgo on_planes{ConvAlgoKind::winograd, WinogradProducts::f32_planes};
  const bool wino = winograd_applies(g);
  if (path == Conv3x3Path::winograd) return run(wino ? (pairs ? on_pairs : on_planes) : im2col);
  std::vector<ConvAlgo> algos;
  std::vector<std::string> names;
  // A candidate where the bf16 GEMM may run on AMX too (not under EMBER_CPU_BF16=avx512_bf16 or f32).
  const Bf16GemmPath gemm = bf16_gemm_path();
  if (path == Conv3x3Path::automatic && direct_fits && amx_tiles() == AmxTiles::hardware &&
      (gemm == Bf16GemmPath::measured || gemm == Bf16GemmPath::amx)) {
    algos.push_back(direct);
    names.push_back("direct (amx)");
  }
  if (wino && pairs) {
    algos.push_back(on_pairs);
    names.push_back(std::string("winograd, bf16 pairs (") + pair_engine_name() + ")");
  }
  if (wino) {
    algos.push_back(on_planes);
    names.push_back(dtype == DType::bf16 ? "winograd, f32 planes" : "winograd");
  }
  if (algos.empty()) return run(im2col);
  algos.push_back(im2col);
  names.push_back("im2col");
  run_measured("conv2d", shape_key(g, pass, dtype), names, [&](int i) { run(algos[i]); });
}

}  // namespace ember::kernels::cpu
