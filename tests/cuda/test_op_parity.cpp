// CPU-vs-CUDA parity of every op case (tests/op_cases.h), forward and backward, in float64 and
// float32; and every case in float16 and bfloat16 on cuda:0 against the CPU's float32 result
// (Note [Low-precision tolerances] in tests/low_precision.h). Each case runs once on the CPU
// (the reference) and once on cuda:0 with the same input values, non-differentiable arguments
// placed on the case's device (case_device()), and the same upstream gradient; outputs and input
// gradients must agree. On the SIMT flavour this executes every hand-written kernel the ops reach
// and, through the emulator's cuBLAS and cuDNN shims, the cuBLAS and cuDNN call sites (ctest's
// cuda-no-cudnn:parity runs the [cudnn_layers] families through the hand-written kernels
// instead).

#include <catch2/catch.hpp>

#include <cmath>

#include <ember/ember.h>

#include "../gradcheck.h"
#include "../low_precision.h"
#include "../op_cases.h"

using namespace ember;
using namespace ember::testing;

namespace {

struct Run {
  Tensor out;
  std::vector<Tensor> grads;
};

// Forward on `inputs` (converted to `dtype`, placed on `device`, made leaves), then backward of
// sum(out * w) for a fixed weight w, so every output element gets a different gradient.
Run run_case(const OpCase& c, const std::vector<Tensor>& inputs, Device device, DType dtype) {
  const Device saved = case_device();
  case_device() = device;
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().to(device, dtype).requires_grad_(true));
  Run r;
  r.out = c.fn(leaves);
  case_device() = saved;
  if (is_floating(r.out.dtype()) && r.out.requires_grad()) {
    Generator g(0x5eed);
    const Tensor w = rand(r.out.shape(), {.dtype = r.out.dtype()}, g).to(device);
    sum(mul(r.out, w)).backward();
  }
  for (const Tensor& l : leaves) r.grads.push_back(l.grad().defined() ? l.grad().cpu() : Tensor());
  r.out = r.out.detach().cpu();
  return r;
}

void check_family(void (*add_cases)(std::vector<OpCase>&)) {
  REQUIRE(cuda_device_count() > 0);
  std::vector<OpCase> cases;
  add_cases(cases);
  REQUIRE(!cases.empty());
  for (const OpCase& c : cases) {
    const std::vector<Tensor> inputs = make_inputs(c);
    // float64: the two sides differ by summation order only (a few ulp of 2^-52; 1e-10 is far
    // above that). float32: the CPU reference sums in double, the CUDA kernels in float (Note
    // [Accumulation types] in core/dtype.h), so the difference is float's rounding along the way:
    // an ulp or two per kernel and about log2(L) ulp for a tree sum of L terms. The budget is
    // (4 + log2 L) ulp of 1.0 (2^-23), L the case's largest input (a bound on every accumulation
    // length), as atol and rtol; the worst case measured is 3 ulp (batch_norm/train_affine_4d).
    const double f32_tol = (4.0 + std::log2(static_cast<double>(accumulation_length(c)))) * std::ldexp(1.0, -23);
    for (DType dtype : {DType::f64, DType::f32}) {
      const double tol = dtype == DType::f64 ? 1e-10 : f32_tol;
      INFO(c.name << " " << dtype);
      Run cpu;
      try {
        cpu = run_case(c, inputs, Device::cpu(), dtype);
      } catch (const Error& e) {
        // A case written for float64 only (e.g. float64 running statistics): the CUDA run must
        // refuse it the same way.
        INFO("the CPU run threw: " << e.what());
        CHECK_THROWS_AS(run_case(c, inputs, Device::cuda(0), dtype), Error);
        continue;
      }
      const Run gpu = run_case(c, inputs, Device::cuda(0), dtype);
      REQUIRE(gpu.out.dtype() == cpu.out.dtype());
      const std::string diff = compare_tensors(gpu.out, cpu.out, tol, tol);
      INFO("forward: " << diff);
      CHECK(diff.empty());
      REQUIRE(gpu.grads.size() == cpu.grads.size());
      for (size_t i = 0; i < cpu.grads.size(); ++i) {
        REQUIRE(gpu.grads[i].defined() == cpu.grads[i].defined());
        if (!cpu.grads[i].defined()) continue;
        const std::string gdiff = compare_tensors(gpu.grads[i], cpu.grads[i], tol, tol);
        INFO("gradient of input " << i << ": " << gdiff);
        CHECK(gdiff.empty());
      }
    }
  }
}

}  // namespace

TEST_CASE("cuda parity: elementwise", "[cuda][parity][cudnn_layers]") { check_family(add_elementwise_cases); }
TEST_CASE("cuda parity: views", "[cuda][parity]") { check_family(add_view_cases); }
TEST_CASE("cuda parity: reductions", "[cuda][parity]") { check_family(add_reduce_cases); }
TEST_CASE("cuda parity: gemm", "[cuda][parity]") { check_family(add_gemm_cases); }
TEST_CASE("cuda parity: conv", "[cuda][parity][cudnn_layers]") { check_family(add_conv_cases); }
TEST_CASE("cuda parity: pooling", "[cuda][parity][cudnn_layers]") { check_family(add_pool_cases); }
TEST_CASE("cuda parity: batch norm", "[cuda][parity][cudnn_layers]") { check_family(add_batchnorm_cases); }
TEST_CASE("cuda parity: dropout", "[cuda][parity]") { check_family(add_dropout_cases); }
TEST_CASE("cuda parity: shape and index ops", "[cuda][parity]") { check_family(add_index_cases); }
TEST_CASE("cuda parity: softmax", "[cuda][parity]") { check_family(add_softmax_cases); }
TEST_CASE("cuda parity: losses", "[cuda][parity]") { check_family(add_loss_cases); }

// Each family in f16 and bf16 on the device, against the CPU's float32 result.
TEST_CASE("cuda low precision: elementwise", "[cuda][low_precision][cudnn_layers]") {
  check_low_precision_family(add_elementwise_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: views", "[cuda][low_precision]") {
  check_low_precision_family(add_view_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: reductions", "[cuda][low_precision]") {
  check_low_precision_family(add_reduce_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: gemm", "[cuda][low_precision]") {
  check_low_precision_family(add_gemm_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: conv", "[cuda][low_precision][cudnn_layers]") {
  check_low_precision_family(add_conv_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: pooling", "[cuda][low_precision][cudnn_layers]") {
  check_low_precision_family(add_pool_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: batch norm", "[cuda][low_precision][cudnn_layers]") {
  check_low_precision_family(add_batchnorm_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: dropout", "[cuda][low_precision]") {
  check_low_precision_family(add_dropout_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: shape and index ops", "[cuda][low_precision]") {
  check_low_precision_family(add_index_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: softmax", "[cuda][low_precision]") {
  check_low_precision_family(add_softmax_cases, Device::cuda(0));
}
TEST_CASE("cuda low precision: losses", "[cuda][low_precision]") {
  check_low_precision_family(add_loss_cases, Device::cuda(0));
}
