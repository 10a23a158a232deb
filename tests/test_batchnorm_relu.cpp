// batch_norm_relu (Note [Batch norm with a fused ReLU] in kernels/batchnorm.h) on the CPU: the
// fused op against the separate ops, bit for bit, forward and backward, in every dtype pairing,
// with and without a residual, training and eval, both memory formats and a NaN; the mixed-dtype
// residual that falls back; and ResNet's BasicBlock and Bottleneck, which use it, against the
// blocks written with the separate ops. The same comparison on a CUDA device: tests/cuda/test_batchnorm_relu.cpp.

#include <catch2/catch.hpp>

#include "batchnorm_relu_run.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("batch_norm_relu equals relu(batch_norm(x) [+ residual]) bit for bit", "[norm]") {
  check_fused_equals_separate(Device::cpu(), [](const BnReluCase&, const std::vector<Tensor>& fused) {
    // The ReLU really ran: no negative output, and a gradient that is not all zeros.
    CHECK(!identical(fused[1], zeros_like(fused[1])));
    for (double v : vec(fused[0])) CHECK(!(v < 0));
  });
}

TEST_CASE("batch_norm_relu: a residual of another dtype runs the separate ops", "[norm]") {
  const Tensor x = from_vector<float>(random_vector<float>(40, 3), {2, 5, 2, 2}).requires_grad_(true);
  const Tensor res = from_vector<float>(random_vector<float>(40, 4), {2, 5, 2, 2}).to(DType::f64);
  const Tensor w = ones({5}), b = zeros({5});
  const Tensor y = batch_norm_relu(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, res);
  CHECK(y.dtype() == DType::f64);  // add promotes
  CHECK(identical(y, relu(add(batch_norm(x, Tensor(), Tensor(), w, b, true), res))));
  CHECK_THROWS_WITH(batch_norm_relu(x, Tensor(), Tensor(), ones({4}), b, true),
                    Catch::Matchers::Contains("batch_norm_relu: weight must have shape"));
}

namespace {
// A ResNet block (its fused forward) against the same block written with the separate ops, forward
// and backward, bit for bit; `separate_body` is the block's ops up to its last batch norm.
template <typename Block, typename Body>
void check_block_equals_separate_ops(int64_t in_planes, int64_t planes, int64_t stride, Body separate_body) {
  auto make = [&] {
    manual_seed(5);
    return Block(in_planes, planes, stride);
  };
  Block fused = make(), separate = make();
  manual_seed(6);
  const Tensor x0 = randn({2, in_planes, 6, 6});
  const Tensor xf = x0.detach().requires_grad_(true), xs = x0.detach().requires_grad_(true);
  const Tensor yf = fused.forward(xf);
  const Tensor ys = relu(add(separate_body(separate, xs), separate.downsample ? separate.downsample->forward(xs) : xs));
  CHECK(identical(yf, ys));
  sum(mul(yf, yf)).backward();
  sum(mul(ys, ys)).backward();
  CHECK(identical(xf.grad(), xs.grad()));
  const auto pf = fused.named_parameters(), ps = separate.named_parameters();
  REQUIRE(pf.size() == ps.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pf[i].first);
    CHECK(identical(pf[i].second.grad(), ps[i].second.grad()));
  }
  const auto bf = fused.named_buffers(), bs = separate.named_buffers();
  for (size_t i = 0; i < bf.size(); ++i) CHECK(identical(bf[i].second, bs[i].second));
}
}  // namespace

TEST_CASE("ResNet's BasicBlock with fused batch norms equals the block written with the separate ops", "[norm][models]") {
  for (bool downsample : {false, true}) {
    INFO("downsample " << downsample);
    check_block_equals_separate_ops<models::BasicBlock>(4, downsample ? 6 : 4, downsample ? 2 : 1,
                                                        [](models::BasicBlock& b, const Tensor& x) {
                                                          return b.bn2(b.conv2(relu(b.bn1(b.conv1(x)))));
                                                        });
  }
}

TEST_CASE("ResNet's Bottleneck with fused batch norms equals the block written with the separate ops", "[norm][models]") {
  // 16 -> 4 * 4 channels at stride 1 has no downsample; 8 -> 16 and stride 2 have one.
  for (auto [in_planes, stride] : {std::pair<int64_t, int64_t>{16, 1}, {8, 1}, {16, 2}}) {
    INFO("in_planes " << in_planes << " stride " << stride);
    check_block_equals_separate_ops<models::Bottleneck>(in_planes, 4, stride, [&](models::Bottleneck& b, const Tensor& x) {
      CHECK((b.downsample != nullptr) == (in_planes != 16 || stride != 1));
      const Tensor h = relu(b.bn2(b.conv2(relu(b.bn1(b.conv1(x))))));
      return b.bn3(b.conv3(h));
    });
  }
}
