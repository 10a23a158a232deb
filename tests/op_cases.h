#pragma once
// One list of op cases drives the f64 finite-difference gradchecks (tests/test_gradcheck.cpp),
// the contiguous-vs-strided checks, and — with the CUDA backend — CPU-vs-CUDA parity.
//
// A case names its differentiable inputs (their shapes and the range their values are drawn
// from) and a function that builds the op's output from them. Inputs are float64 leaves filled
// from Philox with a seed derived from the case name, so every run sees the same numbers.
// Non-differentiable arguments (indices, labels, masks) are built inside `fn` from fixed values.

#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::testing {

struct OpCase {
  std::string name;                                        // "family/variant", e.g. "add/broadcast"
  std::vector<Shape> inputs;                               // shapes of the differentiable inputs
  std::function<Tensor(const std::vector<Tensor>&)> fn;    // builds the output from the inputs
  double lo = -1.0, hi = 1.0;                              // inputs are drawn from U[lo, hi)
  // Optional: adjusts freshly drawn inputs (moves values away from kinks or ties). Runs on
  // contiguous float64 CPU tensors before they become leaves.
  std::function<void(std::vector<Tensor>&)> prepare;
  // Whether the strided variant applies (inputs made non-contiguous with the same values).
  bool strided = true;
  // Finite differences: step and the tolerance on max |analytic - numeric| / max(1, |numeric|).
  double eps = 1e-6;
  double tol = 1e-6;
};

// Each family adds its cases (tests/cases/<family>_cases.cpp).
void add_elementwise_cases(std::vector<OpCase>& cases);
void add_view_cases(std::vector<OpCase>& cases);
void add_reduce_cases(std::vector<OpCase>& cases);
void add_gemm_cases(std::vector<OpCase>& cases);
void add_conv_cases(std::vector<OpCase>& cases);
void add_pool_cases(std::vector<OpCase>& cases);
void add_batchnorm_cases(std::vector<OpCase>& cases);
void add_dropout_cases(std::vector<OpCase>& cases);
void add_index_cases(std::vector<OpCase>& cases);
void add_softmax_cases(std::vector<OpCase>& cases);
void add_loss_cases(std::vector<OpCase>& cases);

// The device on which a case builds its non-differentiable arguments (indices, labels, class
// weights, running statistics): the CPU for the gradchecks, the CUDA device for the CPU-vs-CUDA
// parity run (tests/cuda/test_op_parity.cpp), which sets it for the duration of a case.
inline Device& case_device() {
  thread_local Device d = Device::cpu();
  return d;
}

// All cases, in family order.
std::vector<OpCase> all_op_cases();

// Channels-last cases (Note [Memory formats] in core/memory_format.h): t in channels-last strides,
// and y after checking that an op kept the format (throws naming `op` otherwise, which fails the
// gradcheck and the CUDA parity test that run the case).
inline Tensor channels_last(const Tensor& t) { return t.contiguous(MemoryFormat::channels_last); }
inline Tensor expect_channels_last(const Tensor& y, const char* op) {
  EMBER_CHECK(y.is_contiguous(MemoryFormat::channels_last) &&
                  y.suggest_memory_format() == MemoryFormat::channels_last,
              op, ": expected a channels-last result, got strides ", y.strides(), " for shape ", y.shape());
  return y;
}

}  // namespace ember::testing
