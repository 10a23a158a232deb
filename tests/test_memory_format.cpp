// Memory formats (Note [Memory formats] in core/memory_format.h): the stride rules, the copies that
// make and keep channels-last tensors, format propagation through the layers of a CNN with values
// identical to NCHW, and Module::to(MemoryFormat). The gradchecks and CUDA parity of the
// channels-last ops are op cases (tests/cases/conv_cases.cpp, pool_cases.cpp, batchnorm_cases.cpp).

#include "memory_format_cnn.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::channels_last;

// A (2, 3, 4, 5) float32 tensor whose element at flat row-major index i is i.
Tensor iota4() { return arange(0, 120).view({2, 3, 4, 5}); }

}  // namespace

TEST_CASE("channels_last strides, is_contiguous and suggest_memory_format", "[memory_format]") {
  CHECK(strides_in({2, 3, 4, 5}, kCL) == Strides{60, 1, 15, 3});
  CHECK(strides_in({2, 3, 4, 5}, MemoryFormat::contiguous) == Strides{60, 20, 5, 1});
  CHECK(error_of([] { (void)strides_in({3, 4, 5}, kCL); }).find("needs a 4-D (N, C, H, W) tensor, got shape (3, 4, 5)") !=
        std::string::npos);

  const Tensor x = iota4();
  CHECK(x.is_contiguous(MemoryFormat::contiguous));
  CHECK_FALSE(x.is_contiguous(kCL));
  CHECK(x.suggest_memory_format() == MemoryFormat::contiguous);

  const Tensor c = x.contiguous(kCL);
  CHECK(c.shape() == x.shape());
  CHECK(c.strides() == Strides{60, 1, 15, 3});
  CHECK(c.is_contiguous(kCL));
  CHECK_FALSE(c.is_contiguous());
  CHECK(c.suggest_memory_format() == kCL);
  CHECK(vec(c) == vec(x));  // the same logical values
  // Memory order is N, H, W, C: the second element in memory is channel 1 of pixel (0, 0).
  CHECK(c.data_ptr<float>()[1] == 20.0f);
  CHECK(c.contiguous(kCL).is_same(c));
  const Tensor back = c.contiguous();
  CHECK(back.is_contiguous());
  CHECK(back.data_ptr<float>()[1] == 1.0f);

  // A permuted NHWC buffer is a channels-last view.
  const Tensor nhwc = arange(0, 120).view({2, 4, 5, 3}).permute({0, 3, 1, 2});
  CHECK(nhwc.suggest_memory_format() == kCL);
  // One channel: both formats are dense; the exact strides decide what suggest says.
  const Tensor one = arange(0, 20).view({1, 1, 4, 5});
  CHECK(one.is_contiguous(kCL));
  CHECK(one.suggest_memory_format() == MemoryFormat::contiguous);
  CHECK(one.contiguous(kCL).suggest_memory_format() == kCL);
  // Not 4-D: never channels-last.
  CHECK_FALSE(arange(0, 6).view({2, 3}).is_contiguous(kCL));
  CHECK(error_of([] { (void)arange(0, 6).view({2, 3}).contiguous(kCL); }).find("needs a 4-D") != std::string::npos);
  CHECK(error_of([&] { (void)x.contiguous(MemoryFormat::preserve); }).find("preserve") != std::string::npos);
}

TEST_CASE("empty, clone and to keep the channels-last format", "[memory_format]") {
  const Tensor e = empty({2, 3, 4, 5}, {.dtype = DType::f64}, kCL);
  CHECK(e.strides() == Strides{60, 1, 15, 3});
  CHECK(e.dtype() == DType::f64);
  CHECK(error_of([] { (void)empty({2, 3}, {}, kCL); }).find("got shape (2, 3)") != std::string::npos);
  CHECK(error_of([] { (void)empty({2, 3}, {}, MemoryFormat::preserve); }).find("preserve") != std::string::npos);

  const Tensor c = iota4().contiguous(kCL);
  CHECK(c.clone().suggest_memory_format() == kCL);                    // preserve
  CHECK(c.clone(MemoryFormat::contiguous).is_contiguous());           // asked for
  CHECK(iota4().clone().is_contiguous());                            // row-major stays row-major
  CHECK(iota4().transpose(2, 3).clone().is_contiguous());  // other strides: copied row-major
  const Tensor d = c.to(DType::f64);
  CHECK(d.suggest_memory_format() == kCL);
  CHECK(vec(d) == vec(iota4()));
  // An in-place op and copy_ write logical positions, whatever the strides.
  Tensor w = zeros({2, 3, 4, 5}).contiguous(kCL);
  w.copy_(iota4());
  w.add_(1.0);
  CHECK(vec(w) == vec(add(iota4(), 1.0)));
}

TEST_CASE("contiguous(channels_last) is differentiable", "[memory_format]") {
  Tensor x = f64(vec(iota4()), {2, 3, 4, 5}, true);
  const Tensor c = x.contiguous(kCL);
  // d/dx sum(c * c) = 2 x: the copy passes the gradient through.
  sum(mul(c, c)).backward();
  check_close(x.grad(), vec(mul(x.detach(), 2.0)), 0.0);
}

TEST_CASE("elementwise ops keep the format of their first full-shape operand", "[memory_format]") {
  const Tensor a = iota4(), ac = a.contiguous(kCL);
  const Tensor bias = arange(0, 3).view({1, 3, 1, 1});
  for (const Tensor& y : {relu(sub(ac, 50.0)), add(ac, bias), mul(ac, ac), add(ac, a), exp(mul(ac, 0.01)),
                          clamp(ac, 3.0, 70.0)})
    CHECK(y.suggest_memory_format() == kCL);
  CHECK(add(a, ac).suggest_memory_format() == MemoryFormat::contiguous);  // the first operand decides
  CHECK(vec(add(ac, bias)) == vec(add(a, bias)));
  CHECK(vec(add(a, ac)) == vec(mul(a, 2.0)));
  CHECK(vec(relu(sub(ac, 50.0))) == vec(relu(sub(a, 50.0))));
  CHECK(vec(clamp(ac, 3.0, 70.0)) == vec(clamp(a, 3.0, 70.0)));
  // ReLU's backward keeps it too (seen on a non-leaf: a leaf's .grad is always row-major).
  Tensor leaf = a.detach().requires_grad_(true);
  Tensor x = sub(leaf.contiguous(kCL), 60.0);
  x.retain_grad();
  Tensor y = relu(x);
  sum(mul(y, y)).backward();
  CHECK(x.grad().suggest_memory_format() == kCL);
  CHECK(vec(x.grad()) == vec(mul(relu(sub(a, 60.0)), 2.0)));
  CHECK(leaf.grad().is_contiguous());
  CHECK(vec(leaf.grad()) == vec(x.grad()));
}


TEST_CASE("a CNN in channels-last: the format propagates, values and gradients are NCHW's", "[memory_format]") {
  const CnnRun nchw = run_cnn(false, Device::cpu()), nhwc = run_cnn(true, Device::cpu());
  for (const Tensor& t : nhwc.intermediates) CHECK(t.suggest_memory_format() == kCL);
  for (const Tensor& t : nchw.intermediates) CHECK(t.is_contiguous());
  // The layers compute in NCHW (Note [Channels-last through the NCHW kernels]) and the
  // elementwise ops do the same arithmetic per element: bit-identical.
  CHECK(nhwc.out == nchw.out);
  CHECK(nhwc.gx == nchw.gx);
  CHECK(nhwc.gw1 == nchw.gw1);
  CHECK(nhwc.gw2 == nchw.gw2);
  CHECK(nhwc.gbn == nchw.gbn);
}

TEST_CASE("a channels-last conv whose input needs no gradient (a network's first layer)", "[memory_format]") {
  const Tensor x = rnd({2, 3, 5, 5}, 8, 1.0);
  Tensor w = rnd({4, 3, 3, 3}, 9, 0.5).requires_grad_(true);
  Tensor wc = rnd({4, 3, 3, 3}, 9, 0.5).contiguous(kCL).detach().requires_grad_(true);
  sum(mul(conv2d(x, w), conv2d(x, w))).backward();
  const Tensor y = conv2d(x.contiguous(kCL), wc);
  CHECK(y.suggest_memory_format() == kCL);
  sum(mul(y, y)).backward();  // no input gradient to convert
  CHECK(vec(wc.grad()) == vec(w.grad()));
}

TEST_CASE("a channels-last CNN under bf16 autocast matches the NCHW one", "[memory_format]") {
  auto run = [](bool cl) {
    AutocastGuard amp(DeviceType::CPU, DType::bf16);
    Tensor x = rnd({2, 4, 6, 6}, 4, 2.0);
    Tensor w = rnd({5, 4, 3, 3}, 5, 0.3);
    if (cl) x = x.contiguous(kCL), w = w.contiguous(kCL);
    const Tensor y = relu(conv2d(x, w, Tensor(), {.padding = {1, 1}}));
    CHECK(y.dtype() == DType::bf16);
    CHECK(y.suggest_memory_format() == (cl ? kCL : MemoryFormat::contiguous));
    return vec(y);
  };
  CHECK(run(true) == run(false));
}

TEST_CASE("Module::to(channels_last) converts the 4-D parameters and keeps the values", "[memory_format]") {
  nn::Conv2d conv(3, 4, 3);
  nn::Linear fc(4, 2);
  const std::vector<double> before = vec(conv.weight);
  conv.to(kCL);
  CHECK(conv.weight.suggest_memory_format() == kCL);
  CHECK(conv.weight.requires_grad());
  CHECK(conv.weight.is_leaf());
  CHECK(vec(conv.weight) == before);
  CHECK(conv.bias.is_contiguous());  // 1-D: left as it is
  fc.to(kCL);                        // no 4-D parameters: nothing changes
  CHECK(fc.weight.is_contiguous());
  // load_state_dict copies into the channels-last parameter: the format stays.
  nn::Conv2d other(3, 4, 3);
  conv.load_state_dict(other.state_dict());
  CHECK(conv.weight.suggest_memory_format() == kCL);
  CHECK(vec(conv.weight) == vec(other.weight));
}
