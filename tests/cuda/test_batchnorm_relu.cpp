// batch_norm_relu on a CUDA device (the emulator in CI; Note [Batch norm with a fused ReLU] in
// kernels/batchnorm.h): the fused kernels against the separate ops on the same device, bit for
// bit, forward and backward — NCHW and channels-last (the (N, S, C) kernels), every dtype pairing,
// training and eval, with and without a residual, and a NaN — and against the CPU's fused op.
// The fused kernels sum in the order the unfused ones do, and the ReLU's mask and the residual add
// are the separate ops' own arithmetic, so nothing may differ in the last bit.

#include "../batchnorm_relu_run.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("cuda: batch_norm_relu equals relu(batch_norm(x) [+ residual]) bit for bit", "[batchnorm]") {
  check_fused_equals_separate(Device::cuda(0), [](const BnReluCase& c, const std::vector<Tensor>& fused) {
    // Channels-last stays channels-last on the device: the (N, S, C) kernels ran, no NCHW copy.
    CHECK(fused[0].suggest_memory_format() ==
          (c.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous));
  });
}

TEST_CASE("cuda: batch_norm_relu matches the CPU's", "[batchnorm]") {
  // float32 sums in another order on the device (block trees): within 1e-5 relative of 1 + |value|.
  for (bool residual : {false, true}) {
    for (bool cl : {false, true}) {
      INFO("residual " << residual << " channels_last " << cl);
      const BnReluCase gpu{.residual = residual, .channels_last = cl, .device = Device::cuda(0)};
      BnReluCase cpu = gpu;
      cpu.device = Device::cpu();
      const std::vector<Tensor> g = run_bn_relu(gpu, true), h = run_bn_relu(cpu, true);
      for (size_t i = 0; i < g.size(); ++i) {
        if (!g[i].defined()) continue;
        const std::vector<double> a = vec(g[i]), b = vec(h[i]);
        for (size_t k = 0; k < a.size(); ++k) CHECK(std::abs(a[k] - b[k]) <= 1e-5 * (1 + std::abs(b[k])));
      }
    }
  }
}
