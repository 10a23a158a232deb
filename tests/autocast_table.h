#pragma once
// The autocast table (Note [Autocast] in core/autocast.h): every op a CNN trains with, the dtypes
// of its inputs and the dtype its output has under autocast. tests/test_autocast.cpp runs it on
// the CPU, tests/cuda/test_autocast.cpp on cuda:0 (a real GPU or the emulator), each in float16
// and bfloat16 regions.

#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::testing {

// A dtype relative to the region: float32, or the region's 16-bit dtype.
enum class Precision { f32, region };

struct AutocastInput {
  Shape shape;
  Precision dtype = Precision::f32;
  double lo = -1.0, hi = 1.0;  // values drawn from U[lo, hi)
};

struct AutocastCase {
  std::string op;                       // "conv2d", "add(region, f32)", ...
  std::vector<AutocastInput> inputs;    // the floating inputs; labels, indices are built in fn
  // Builds the output from the inputs; `device` is where fn puts what it builds itself.
  std::function<Tensor(const std::vector<Tensor>& in, Device device)> fn;
  Precision out;                        // the output's dtype under autocast
};

// The table, in the order of Note [Autocast]'s lists.
const std::vector<AutocastCase>& autocast_cases();

// Runs every case on `device` under AutocastGuard(device.type, region): the output has the dtype
// the table states, and its values match the same op computed in float64 without autocast on the
// same input values (within the 16-bit dtype's rounding).
void check_autocast_table(Device device, DType region);

// A small CNN (conv, batch norm, ReLU, max-pool, linear) with float32 parameters on `device`,
// forward and loss under autocast, backward after the region: every parameter's gradient is
// float32 and close to the float32 run's; the logits are 16-bit and the loss float32.
void check_autocast_gradients(Device device, DType region);

// Training-mode batch_norm of a 16-bit input with float32 weight, bias and running statistics under
// autocast (Note [Mixed-precision batch norm] in kernels/batchnorm.h): the graph keeps the 16-bit
// input, not a float32 copy (the allocator's bytes in use after the forward pass); y and grad x
// are 16-bit and within one 16-bit rounding of a float64 computation on the same values; grad
// weight, grad bias and the running statistics are float32 and within float32 accuracy of it.
void check_autocast_batch_norm(Device device, DType region);

}  // namespace ember::testing
