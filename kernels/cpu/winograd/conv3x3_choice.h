#pragma once
// Which algorithm a pass of a CPU convolution runs: Winograd F(2x2, 3x3) (conv_winograd.h), the
// direct convolution on AMX tiles (bf16/conv_amx.h) or im2col + GEMM (conv.cpp), and for bf16 on
// Winograd whether its products run on bf16 pairs. conv.cpp asks run_conv_pass for every f32 and
// bf16 pass; where several algorithms apply, each layer and pass takes the one that measures
// fastest the first time it is seen (Note [When bf16 Winograd pays] in conv3x3_choice.cpp).

#include <cstdint>
#include <functional>
#include <string>

#include "../../../core/dtype.h"
#include "../../conv.h"

namespace ember::kernels::cpu {

// automatic: by measurement among the algorithms that apply (Winograd; for bf16 on AMX tiles the
// direct convolution; im2col + GEMM always); winograd: Winograd wherever it applies; direct_amx:
// the direct AMX convolution wherever it applies (bf16 stride-1 convolutions, amx_tiles() not off);
// im2col: always im2col + GEMM.
enum class Conv3x3Path { automatic, winograd, im2col, direct_amx };

// The path that f32 and bf16 convolutions take: automatic unless the environment says
// EMBER_CPU_CONV=winograd, im2col or direct. set_conv3x3_path chooses it for the whole process
// (tests and benchmarks compare them); not thread-safe with convolutions in flight.
Conv3x3Path conv3x3_path();
void set_conv3x3_path(Conv3x3Path path);
// "measured per layer: winograd F(2x2,3x3), direct on AMX tiles or im2col + GEMM",
// "winograd F(2x2,3x3)", "im2col + GEMM", "direct on AMX tiles".
const char* conv3x3_path_name(Conv3x3Path path);
// What `ember info` and the benchmarks print: the path, the transforms' loops, the cases Winograd
// covers and what its bf16 products run on, e.g. "measured per layer: winograd F(2x2,3x3) or
// im2col + GEMM (winograd: AVX-512 transforms; f32 and bf16, 3x3 stride 1, >= 16 channels; bf16
// products on bf16 pairs (AMX tiles))".
std::string conv3x3_description();

// Whether this geometry may run on the Winograd path under the current conv3x3_path(): 3x3,
// stride 1, no dilation, one group, padding at most 2, at least 16 channels on both sides, and the
// path automatic or winograd. The same for the forward pass and both gradients.
bool winograd_applies(const Conv2dGeometry& g);

// How a bf16 convolution on the Winograd path runs its products (Note [bf16 Winograd products] in
// conv_winograd.cpp): on float32 planes (sgemm; the exact contract of Note [bf16 convolutions]),
// or on the planes rounded to bf16 pairs (AMX tiles where amx_tiles() is not off, else VDPBF16PS).
enum class WinogradProducts { f32_planes, bf16_pairs };

// The algorithm of one pass: im2col + GEMM, Winograd with its products as given (float32
// convolutions: f32_planes), or the direct convolution on AMX tiles (bf16/conv_amx.h).
enum class ConvAlgoKind { im2col, winograd, direct_amx };
struct ConvAlgo {
  ConvAlgoKind kind = ConvAlgoKind::im2col;
  WinogradProducts products = WinogradProducts::f32_planes;
};
enum class ConvPass { forward, backward_data, backward_weight };

// Runs one pass of a convolution of `dtype` (f32 or bf16): run(algo) must compute the whole pass
// with that algorithm. Under automatic, the algorithm measured fastest for this (pass, dtype,
// geometry, thread count) among those that apply: the direct convolution on AMX tiles (bf16
// stride-1 convolutions where amx_tiles() is hardware and the bf16 GEMM's path is measured or
// amx), Winograd on bf16 pairs (bf16, where
// winograd_bf16_products()), Winograd on float32 planes, im2col + GEMM; just im2col where no
// other applies. A forced path runs its algorithm where it applies, im2col elsewhere.
void run_conv_pass(const Conv2dGeometry& g, ConvPass pass, DType dtype, const std::function<void(ConvAlgo)>& run);

}  // namespace ember::kernels::cpu
