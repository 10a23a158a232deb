// Channels-last on a CUDA device (the emulator in the default build): the format propagates
// through conv, batch norm, ReLU and the pools, with values and gradients equal to the NCHW run on
// the same device and to the CPU's within the float reduction-order tolerance; copies
// between the CPU and the device keep the format. The per-op gradchecks and CPU parity are op
// cases (tests/cases/conv_cases.cpp, pool_cases.cpp, batchnorm_cases.cpp), run here by test_op_parity.cpp.

#include "../memory_format_cnn.h"

using namespace ember;
using namespace ember::testing;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::channels_last;
}  // namespace

TEST_CASE("cuda: a CNN in channels-last keeps the format and NCHW's values", "[memory_format]") {
  const Device gpu = Device::cuda(0);
  const CnnRun nchw = run_cnn(false, gpu), nhwc = run_cnn(true, gpu);
  for (const Tensor& t : nhwc.intermediates) {
    CHECK(t.device() == gpu);
    CHECK(t.suggest_memory_format() == kCL);
  }
  // Same device: batch norm reads the channels-last activation in place (Note [Channels-last batch
  // norm] in kernels/cuda/batchnorm.cu), its float32 sums in another order than the NCHW kernels',
  // so the runs differ as the CPU's does: the tolerance of the CPU comparison below. (Batch norm's
  // input gradient subtracts two sums from grad y, so an element much smaller than its terms
  // carries their rounding: 4e-5 relative to 1 + |value| is what gx and gw1 show, 2e-7 elsewhere.)
  CHECK(max_rel_diff(nhwc.out, nchw.out) < 1e-4);
  CHECK(max_rel_diff(nhwc.gx, nchw.gx) < 1e-4);
  CHECK(max_rel_diff(nhwc.gw1, nchw.gw1) < 1e-4);
  CHECK(max_rel_diff(nhwc.gw2, nchw.gw2) < 1e-4);
  CHECK(max_rel_diff(nhwc.gbn, nchw.gbn) < 1e-4);
  // Against the CPU: float32 sums in another order (cuDNN's or the tiled GEMM's), so a relative
  // tolerance of 1e-4 on values of order 1 to 100. The device's batch norm statistics are one pass
  // of float32 shifted sums against the CPU's two passes in double (Note [One-pass batch norm
  // statistics] in kernels/cuda/batchnorm.cu): a few float32 ulps of each channel's invstd, which
  // the input gradient's cancelling sums carry into gx and gw1 (1.05e-4 relative to 1 + |value|
  // measured), so those two get 2e-4.
  const CnnRun cpu = run_cnn(true, Device::cpu());
  CHECK(max_rel_diff(nhwc.out, cpu.out) < 1e-4);
  CHECK(max_rel_diff(nhwc.gx, cpu.gx) < 2e-4);
  CHECK(max_rel_diff(nhwc.gw1, cpu.gw1) < 2e-4);
  CHECK(max_rel_diff(nhwc.gw2, cpu.gw2) < 1e-4);
}

TEST_CASE("cuda: copies between the CPU and the device keep channels-last", "[memory_format]") {
  const Tensor x = rnd({2, 3, 4, 5}, 7, 1.0).contiguous(kCL);
  const Tensor d = x.to(Device::cuda(0));
  CHECK(d.suggest_memory_format() == kCL);
  CHECK(vec(d) == vec(x));
  const Tensor h = d.to(Device::cpu(), DType::f64);
  CHECK(h.suggest_memory_format() == kCL);
  CHECK(vec(h) == vec(x));
  // Into a row-major destination the copy reorders.
  Tensor rm = empty({2, 3, 4, 5});
  rm.copy_(d);
  CHECK(rm.is_contiguous());
  CHECK(vec(rm) == vec(x));
  // ReLU on a channels-last device tensor (cuDNN's activation over the flat storage, or the kernel).
  Tensor r = relu(d);
  CHECK(r.suggest_memory_format() == kCL);
  CHECK(vec(r) == vec(relu(x)));
}
