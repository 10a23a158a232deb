// Autocast on cuda:0 — a real GPU or the emulator (Note [Autocast] in core/autocast.h): the dtype
// table of tests/cases/autocast_cases.cpp in float16 and bfloat16 regions, the gradients of float32
// parameters, and a CUDA region leaving CPU tensors alone. The CPU's run: tests/test_autocast.cpp.

#include <catch2/catch.hpp>
#include <ember/core/autocast.h>
#include <ember/ember.h>

#include "../autocast_table.h"

using namespace ember;

TEST_CASE("cuda autocast: the dtype of every op, float16 and bfloat16", "[cuda][autocast]") {
  for (const DType region : {DType::f16, DType::bf16}) ember::testing::check_autocast_table(Device::cuda(0), region);
}

TEST_CASE("cuda autocast: gradients of float32 parameters are float32 and close to the float32 run's",
          "[cuda][autocast]") {
  for (const DType region : {DType::f16, DType::bf16})
    ember::testing::check_autocast_gradients(Device::cuda(0), region);
}

TEST_CASE("cuda autocast: batch_norm keeps its 16-bit input for backward, float32 statistics and parameter "
          "gradients",
          "[cuda][autocast]") {
  for (const DType region : {DType::f16, DType::bf16})
    ember::testing::check_autocast_batch_norm(Device::cuda(0), region);
}

TEST_CASE("cuda autocast: a CUDA region casts CUDA tensors only", "[cuda][autocast]") {
  const Tensor x = ones({2, 4}), w = ones({3, 4});
  AutocastGuard amp(DeviceType::CUDA, DType::f16);
  CHECK(linear(x, w).dtype() == DType::f32);
  const Tensor y = linear(x.to(Device::cuda(0)), w.to(Device::cuda(0)));
  CHECK(y.dtype() == DType::f16);
  CHECK(y.device() == Device::cuda(0));
  CHECK(y.to(Device::cpu()).to(DType::f32).to_vector<float>() == std::vector<float>(6, 4.0f));
}
