#pragma once
// Every op case (tests/op_cases.h) in float16 and bfloat16 against its float32 result.
//
// Note [Low-precision tolerances]
// A case's inputs are drawn as for the gradcheck, rounded to the 16-bit dtype, and run twice from
// those same values: in the 16-bit dtype on the device under test, and in float32 on the CPU (the
// reference). The rounding of the inputs is therefore not part of the difference; what is left is
// what the 16-bit run does differently: every kernel rounds its output to the 16-bit dtype (half
// an ulp: the unit roundoff u, 2^-11 for f16 and 2^-8 for bf16), a case of several ops
// (mse_loss, a normalization, a CPU product through its casts; on CUDA, the gradient of a
// broadcast operand of matmul, summed from per-batch products each rounded to 16 bits) rounds
// each intermediate too, and the backward passes gradients along a chain of such kernels.
// Accumulation happens in float on both sides (acc_t), so a sum of L terms adds only float's
// L * 2^-24 — but the 16-bit rounding of the terms that reach a reduction (an intermediate of a
// composite op) adds up to about sqrt(L) u of random-sign error, and log2(L) u in the worst tree.
// Each element must satisfy
//
//   |x16 - x32| <= budget(L) * u * max(1, |x32|),   budget(L) = 4 + log2(L)
//
// where L is the largest input's element count (accumulation_length: a bound on every sum in the
// case): 4 u for the few roundings of a forward and backward chain, plus the accumulation term.
// The worst case measured is 5.6 u of a budget of 10.3 u (conv2d/conv_tanh_conv, bf16: two
// convolutions and a tanh, each rounded); most cases stay within 2 u. The CUDA products' worst,
// with 16-bit GEMMs (Note [16-bit GEMM on CUDA] in kernels/cuda/gemm.cu), cuBLAS and tiled alike:
// 2.5 u (matmul/broadcast_batch, bf16; 0.7 u when products widened to f32 and rounded once).
// max(1, |x32|) is the gradcheck's scale: values and gradients are of order 1, and where terms of
// order 1 cancel (softmax's and batch norm's backward) the error is absolute, not relative.

#include <set>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "op_cases.h"

namespace ember::testing {

// The element count of the case's largest input, at least 2: a bound on the length of every sum
// the case computes (its accumulation length L).
int64_t accumulation_length(const OpCase& c);
// The unit roundoff of a 16-bit dtype: 2^-11 (f16), 2^-8 (bf16).
double unit_roundoff(DType dtype);
// budget(L) * u of Note [Low-precision tolerances] for case c.
double low_precision_tolerance(const OpCase& c, DType dtype);

struct LowPrecisionResult {
  bool refused = false;    // the 16-bit run threw (what() in `error`)
  std::string error;       // the refusal's message, or "" / the worst element beyond tolerance
  double worst_ratio = 0;  // max |x16 - x32| / (u * max(1, |x32|)) over outputs and gradients
};

// Runs case c in `dtype` (f16 or bf16) on `device` and in float32 on the CPU; compares the
// outputs and every input's gradient (Note [Low-precision tolerances]), which must also be of
// `dtype`.
LowPrecisionResult check_low_precision(const OpCase& c, Device device, DType dtype);

// The cases that refuse f16/bf16 inputs (on every device), by name, each with its reason in
// low_precision.cpp. Every other case must run in both 16-bit dtypes within tolerance.
const std::set<std::string>& cases_without_low_precision();

// Catch2 checks of every case of a family (add_cases) on `device`, in f16 and bf16.
void check_low_precision_family(void (*add_cases)(std::vector<OpCase>&), Device device);

}  // namespace ember::testing
