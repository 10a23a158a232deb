#pragma once
// Helpers shared by the op implementations (core/tensor.cpp, layers/, optim/, parallel/;
// internal, not part of the public API): turning tensors into kernel operands, the common
// argument checks, and the device dispatch of core/dispatch.h (Note [Device dispatch]).

#include <initializer_list>

#include "autograd.h"
#include "dispatch.h"
#include "tensor.h"
#include "../kernels/strided.h"

namespace ember::detail {

// The iteration shape for kernels.
kernels::IterShape iter_shape(const Shape& shape);
// An operand reading `t` broadcast to `shape` (stride 0 along broadcast dims). t's shape must
// broadcast to `shape` (checked by the caller).
kernels::Operand operand(const Tensor& t, const Shape& shape);
// An operand over t in its own shape.
inline kernels::Operand operand(const Tensor& t) { return operand(t, t.shape()); }
// The same iteration with its dims walked in the memory order of `order`: for channels_last and a
// 4-D shape, (N, H, W, C), so that the kernels' loops (which merge dims that are contiguous with
// each other) run over channels-last operands as one flat range. Every operand of one kernel call
// must be built with the same order.
kernels::IterShape iter_shape(const Shape& shape, MemoryFormat order);
kernels::Operand operand(const Tensor& t, const Shape& shape, MemoryFormat order);
// The memory format of an elementwise op's output of `shape`: that of the first input with that
// full shape (Note [Memory formats] in core/memory_format.h), contiguous when none has it.
MemoryFormat elementwise_format(const Shape& shape, std::initializer_list<const Tensor*> inputs);

// Note [Channels-last through the NCHW kernels]
// On a CUDA device the layers of a CNN compute channels-last tensors as they lie: conv2d, max and
// average pooling through cuDNN's NHWC descriptors (Note [Channels-last convolutions and pooling]
// in kernels/cuda/cudnn.h; f32, f16 and bf16), max pooling with indices (and any max pooling cuDNN
// does not serve) through the hand-written NHWC kernels (Note [Channels-last max pooling] in
// kernels/cuda/pool.cu), batch norm through its NHWC kernels (Note [Channels-last batch norm] in
// kernels/cuda/batchnorm.cu); the last two for every floating dtype. Everywhere else — the CPU
// kernels (kernels/conv.h, batchnorm.h, pool.h), float64 convolutions and cuDNN pooling on the
// device, EMBER_CUDNN=0 (for convolutions and average pooling), average pooling cuDNN does not
// serve (ceil-mode windows) and adaptive average pooling — the op copies
// a channels-last input to NCHW (the .contiguous() each op already makes), computes, and returns its
// result copied back into channels-last with to_format(); its backward likewise computes the input
// gradient in NCHW and returns it channels-last. Those values are the NCHW op's, bit for bit (the
// copies move values, they do not round), and the format propagates through a network, so the
// elementwise ops between these layers (ReLU, the residual add) run on channels-last tensors. Each
// conversion is one read and one write of the tensor: docs/amp.md measures what they cost.
//
// `t` (a fresh result, cut from the graph; may be undefined) in `format`: t itself unless format is
// channels_last and t is 4-D, a channels-last copy then (made without recording autograd).
Tensor to_format(const Tensor& t, MemoryFormat format);
// channels_last when t is a 4-D tensor with channels-last strides (suggest_memory_format()).
bool is_channels_last(const Tensor& t);

// Throws: "<op>: expected all tensors on one device, got cpu and cuda:0".
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Throws: "<op>: expected a floating-point tensor (float32 or float64), got int64 ...".
void check_floating(const char* op, const Tensor& t);
// The argument checks batch_norm and parallel::sync_batch_norm share (layers/batchnorm.cpp): x is
// (N, C, ...) and floating-point; weight, bias, running_mean and running_var are each undefined or
// C floating-point values on x's device; the running statistics come together; eps >= 0.
void check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, double eps);

}  // namespace ember::detail
