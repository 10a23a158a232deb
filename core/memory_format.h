#pragma once
// Memory formats: in which order the elements of a 4-D (N, C, H, W) tensor lie in memory.
//
// Note [Memory formats]
// A tensor's shape is always (N, C, H, W); the memory format is only its strides, as in PyTorch:
//   contiguous     (NCHW): strides (C*H*W, H*W, W, 1) — the row-major default;
//   channels_last  (NHWC): strides (H*W*C, 1, W*C, C) — the C values of one pixel lie side by side,
//                  the layout tensor-core convolutions read without a transpose;
//   preserve       (only as an argument): keep the format of the tensor being copied.
// x.contiguous(MemoryFormat::channels_last) copies x into channels-last strides (differentiable: a
// clone, whose gradient passes through unchanged); x.is_contiguous(format) checks the strides,
// ignoring those of size-1 dims as is_contiguous() does; x.suggest_memory_format() is
// channels_last when x's strides are exactly channels-last ones and differ from the row-major
// ones, contiguous otherwise. clone() and to() preserve the format of a channels-last tensor;
// every other tensor (a transposed or sliced view included) is copied into row-major strides —
// PyTorch keeps the strides of any dense tensor there, ember only the two formats. empty_like and
// zeros_like are row-major whatever the format of their model; a leaf's accumulated .grad and an
// optimizer's state take the parameter's format (Note [A leaf's gradient] in core/autograd.cpp).
//
// Which ops keep channels-last (an op not listed returns the row-major format, with the same
// values): elementwise unary and binary ops take the format of their first operand that has the
// output's full shape (PyTorch's TensorIterator gives ties to the first input), and run over the
// operands in that memory order; conv2d (input or weight channels-last), batch_norm, max_pool2d,
// avg_pool2d and adaptive_avg_pool2d return channels-last for a channels-last input (Note
// [Channels-last through the NCHW kernels] in core/op_helpers.h).

#include <cstdint>

#include "shape.h"

namespace ember {

enum class MemoryFormat { contiguous, channels_last, preserve };

// "contiguous", "channels_last", "preserve".
const char* memory_format_name(MemoryFormat format);
// The strides of a dense tensor of `shape` in `format` (contiguous or channels_last; channels_last
// needs 4 dims: the error names the shape).
Strides strides_in(const Shape& shape, MemoryFormat format);
// Whether `strides` are those of a dense tensor of `shape` in `format` (size-1 dims' strides are
// not looked at). A shape that is not 4-D is never channels_last.
bool is_contiguous_in(const Shape& shape, const Strides& strides, MemoryFormat format);
// channels_last when `strides` equal strides_in(shape, channels_last) and differ from the row-major
// ones; contiguous otherwise (Note [Memory formats]).
MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides);

}  // namespace ember
