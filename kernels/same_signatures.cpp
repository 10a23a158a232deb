// Note [Shared kernel declarations]
// Every kernel that both backends implement takes the same arguments in kernels::cpu and
// kernels::gpu: the contract lives once, in the backend-neutral header kernels/<family>.h, and
// EMBER_KERNEL_CALL (core/dispatch.h) passes one argument list to both. So the declarations are
// written once too: kernels/<family>_decls.h lists them, with no includes and no #pragma once,
// and kernels/cpu/<family>.h and kernels/cuda/<family>.h each include that list inside their own
// namespace, after the includes that give it its types. A backend header then adds only what is
// its own (the CPU's *_reference functions, the GPU's 16-bit gemm overloads and multi-tensor
// optimizer steps) and the comments on how it runs them. The CUDA headers include no CUDA header,
// so both lists are read in every build flavour, a CPU-only one included.
//
// This file is the compile-time check behind that: it fails to compile the moment a kernel named
// below is missing on one side or has another signature there (a declaration moved out of a
// shared list, an overload added beside it). Nothing here generates code.
//
// Kernels that exist on one side only are deliberately absent: the CPU's *_reference functions
// and BlasSingleThreadGuard, the GPU's gemm_tiled, the multi-tensor optimizer steps, the random
// fills (the CPU fills are in core/generator.cpp) and the cuDNN wrappers.

#include <type_traits>

#include "cpu/batchnorm.h"
#include "cpu/conv.h"
#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/index.h"
#include "cpu/loss.h"
#include "cpu/optim.h"
#include "cpu/pool.h"
#include "cpu/reduce.h"
#include "cpu/softmax.h"
#include "cuda/batchnorm.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/gemm.h"
#include "cuda/index.h"
#include "cuda/loss.h"
#include "cuda/optim.h"
#include "cuda/pool.h"
#include "cuda/reduce.h"
#include "cuda/softmax.h"

namespace ember::kernels {
namespace {

// A kernel with one overload: its function types must be equal.
#define EMBER_SAME_SIGNATURE(name)                                                     \
  static_assert(std::is_same_v<decltype(cpu::name), decltype(gpu::name)>,              \
                "kernels::cpu::" #name " and kernels::gpu::" #name " have different signatures")

// One overload of an overloaded kernel, named by its function type: both sides must declare it
// (the static_cast does not compile otherwise).
#define EMBER_SAME_OVERLOAD(name, ...)                                                              \
  static_assert(std::is_same_v<decltype(static_cast<__VA_ARGS__*>(&cpu::name)),                     \
                               decltype(static_cast<__VA_ARGS__*>(&gpu::name))>,                     \
                "kernels::cpu::" #name " and kernels::gpu::" #name " differ in an overload")

// kernels/elementwise.h
EMBER_SAME_SIGNATURE(unary);
EMBER_SAME_SIGNATURE(unary_backward);
EMBER_SAME_SIGNATURE(binary);
EMBER_SAME_SIGNATURE(pow_backward);
EMBER_SAME_SIGNATURE(compare);
EMBER_SAME_SIGNATURE(where);
EMBER_SAME_SIGNATURE(clamp);
EMBER_SAME_SIGNATURE(copy);
EMBER_SAME_SIGNATURE(fill);
EMBER_SAME_SIGNATURE(logical_not);
EMBER_SAME_SIGNATURE(isnan);

// kernels/reduce.h
EMBER_SAME_SIGNATURE(sum);
EMBER_SAME_SIGNATURE(var);
EMBER_SAME_SIGNATURE(extremum);
EMBER_SAME_SIGNATURE(extremum_backward);
EMBER_SAME_SIGNATURE(arg_extremum);
EMBER_SAME_SIGNATURE(index_backward);

// kernels/index.h
EMBER_SAME_SIGNATURE(gather);
EMBER_SAME_SIGNATURE(scatter_add);
EMBER_SAME_SIGNATURE(indices_in_range);
EMBER_SAME_SIGNATURE(one_hot);

// kernels/gemm.h
template <typename T>
using Gemm = void(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*,
                  int64_t);
template <typename T>
using GemmBatched = void(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T* const*, int64_t,
                         const T* const*, int64_t, T, T* const*, int64_t, int64_t);
EMBER_SAME_OVERLOAD(gemm, Gemm<float>);
EMBER_SAME_OVERLOAD(gemm, Gemm<double>);
EMBER_SAME_OVERLOAD(gemm_batched, GemmBatched<float>);
EMBER_SAME_OVERLOAD(gemm_batched, GemmBatched<double>);

// kernels/conv.h
template <typename T>
using Im2col = void(const Conv2dGeometry&, const T*, T*);
EMBER_SAME_OVERLOAD(im2col, Im2col<float>);
EMBER_SAME_OVERLOAD(im2col, Im2col<double>);
EMBER_SAME_OVERLOAD(col2im, Im2col<float>);
EMBER_SAME_OVERLOAD(col2im, Im2col<double>);
EMBER_SAME_SIGNATURE(conv2d_forward);
EMBER_SAME_SIGNATURE(conv2d_backward_data);
EMBER_SAME_SIGNATURE(conv2d_backward_weight);
EMBER_SAME_SIGNATURE(conv2d_backward_bias);

// kernels/pool.h
EMBER_SAME_SIGNATURE(max_pool2d_forward);
EMBER_SAME_SIGNATURE(max_pool2d_backward);
EMBER_SAME_SIGNATURE(avg_pool2d_forward);
EMBER_SAME_SIGNATURE(avg_pool2d_backward);
EMBER_SAME_SIGNATURE(adaptive_avg_pool2d_forward);
EMBER_SAME_SIGNATURE(adaptive_avg_pool2d_backward);

// kernels/batchnorm.h
EMBER_SAME_SIGNATURE(batch_norm_stats);
EMBER_SAME_SIGNATURE(batch_norm_apply);
EMBER_SAME_SIGNATURE(batch_norm_backward);

// kernels/softmax.h
EMBER_SAME_SIGNATURE(softmax_forward);
EMBER_SAME_SIGNATURE(softmax_backward);

// kernels/loss.h
EMBER_SAME_SIGNATURE(find_invalid_target);
EMBER_SAME_SIGNATURE(cross_entropy_forward);
EMBER_SAME_SIGNATURE(cross_entropy_backward);
EMBER_SAME_SIGNATURE(nll_loss_forward);
EMBER_SAME_SIGNATURE(nll_loss_backward);

// kernels/optim.h
EMBER_SAME_SIGNATURE(adam_step);
EMBER_SAME_SIGNATURE(sgd_step);
EMBER_SAME_SIGNATURE(grad_norm);
EMBER_SAME_SIGNATURE(clip_coefficient);
EMBER_SAME_SIGNATURE(scale_grads);
EMBER_SAME_SIGNATURE(non_finite_check_and_unscale);
EMBER_SAME_SIGNATURE(update_scale);

#undef EMBER_SAME_SIGNATURE
#undef EMBER_SAME_OVERLOAD

}  // namespace
}  // namespace ember::kernels
