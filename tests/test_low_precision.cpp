// Every op case (tests/op_cases.h) in float16 and bfloat16 on the CPU, against the float32
// result from the same rounded inputs (Note [Low-precision tolerances] in low_precision.h). The
// CUDA device runs the same checks in tests/cuda/test_op_parity.cpp.

#include <catch2/catch.hpp>

#include "low_precision.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("low precision cpu: elementwise", "[low_precision]") {
  check_low_precision_family(add_elementwise_cases, Device::cpu());
}
TEST_CASE("low precision cpu: views", "[low_precision]") {
  check_low_precision_family(add_view_cases, Device::cpu());
}
TEST_CASE("low precision cpu: reductions", "[low_precision]") {
  check_low_precision_family(add_reduce_cases, Device::cpu());
}
TEST_CASE("low precision cpu: gemm", "[low_precision]") {
  check_low_precision_family(add_gemm_cases, Device::cpu());
}
TEST_CASE("low precision cpu: conv", "[low_precision]") {
  check_low_precision_family(add_conv_cases, Device::cpu());
}
TEST_CASE("low precision cpu: pooling", "[low_precision]") {
  check_low_precision_family(add_pool_cases, Device::cpu());
}
TEST_CASE("low precision cpu: batch norm", "[low_precision]") {
  check_low_precision_family(add_batchnorm_cases, Device::cpu());
}
TEST_CASE("low precision cpu: dropout", "[low_precision]") {
  check_low_precision_family(add_dropout_cases, Device::cpu());
}
TEST_CASE("low precision cpu: shape and index ops", "[low_precision]") {
  check_low_precision_family(add_index_cases, Device::cpu());
}
TEST_CASE("low precision cpu: softmax", "[low_precision]") {
  check_low_precision_family(add_softmax_cases, Device::cpu());
}
TEST_CASE("low precision cpu: losses", "[low_precision]") {
  check_low_precision_family(add_loss_cases, Device::cpu());
}

// The checker itself: a case whose 16-bit run is off by a planted error k u (u = the dtype's unit
// roundoff) passes at k = 1 and fails at k = 16, for the budget of Note [Low-precision tolerances]
// (4 + log2(12) = 7.6 u here); its float32 run is exact.
TEST_CASE("low precision check: a planted error beyond the budget fails", "[low_precision]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (double k : {1.0, 16.0}) {
      const OpCase planted{.name = "planted/error", .inputs = {{3, 4}}, .fn = [k](const std::vector<Tensor>& in) {
                             const Tensor& x = in[0];
                             return x.dtype() == DType::f32 ? mul(x, 1.0) : add(x, k * unit_roundoff(x.dtype()));
                           }};
      const LowPrecisionResult r = check_low_precision(planted, Device::cpu(), dtype);
      INFO(dtype << " k = " << k << ": worst " << r.worst_ratio << " u; " << r.error);
      REQUIRE(!r.refused);
      CHECK(r.worst_ratio >= k - 1);
      CHECK(r.error.empty() == (k == 1.0));
    }
  }
}
