#pragma once
// bf16 convolutions run directly on AMX tiles, without im2col (Note [Direct convolution on AMX
// tiles] in conv_amx.cpp), internal to kernels/cpu: the forward pass and both gradients of a
// stride-1 convolution. conv.cpp's run_conv_pass (winograd/conv3x3_choice.h) measures it against
// Winograd and im2col + GEMM where the CPU has AMX tiles; the tests run it on the emulator's.

#include "../../../core/dtype.h"
#include "../../conv.h"
#include "amx_tiles.h"

namespace ember::kernels::cpu {

// Whether the direct convolution covers this geometry: stride 1, dilation 1, one group, padding
// at most kernel - 1 in each dimension (so that the input gradient's padding kernel - 1 - pad is
// not negative), a non-empty output.
bool amx_conv_applies(const Conv2dGeometry& g);

// y (n, c_out, out_h, out_w) = conv2d(x, w) + bias (bias may be null), bf16, summed in f32 and
// rounded once, on `tiles` (hardware or emulated). Parallel over images.
void amx_conv_forward(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w,
                      const BFloat16* bias, BFloat16* y);
// gx (n, c_in, h, w) = the gradient of the input: the convolution of gy with the flipped,
// channel-swapped filter and padding kernel - 1 - pad (Note [Winograd convolution]'s argument).
void amx_conv_backward_data(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* w,
                            BFloat16* gx);
// gw (c_out, c_in, kh, kw) = the gradient of the weights over the batch (overwritten), summed in
// f32 per part of the batch, the parts added in order, each weight rounded once.
void amx_conv_backward_weight(AmxTiles tiles, const Conv2dGeometry& g, const BFloat16* gy, const BFloat16* x,
                              BFloat16* gw);

}  // namespace ember::kernels::cpu
