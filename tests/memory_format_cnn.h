// A small CNN run in NCHW or channels-last, for the memory-format tests on the CPU
// (tests/test_memory_format.cpp) and on a CUDA device (tests/cuda/test_memory_format.cpp).
#pragma once

#include <ember/ember.h>

#include <vector>

#include "test_util.h"

namespace ember::testing {

// float32 values drawn from U[-scale, scale) (seeded), on `dev`.
inline Tensor rnd(const Shape& shape, uint32_t seed, double scale, Device dev = Device::cpu()) {
  const std::vector<float> v = random_vector<float>(static_cast<size_t>(numel_of(shape)), seed);
  return mul(from_vector<float>(v, shape), scale).to(dev);
}

// A small CNN's forward and backward (conv, batch norm, ReLU, max pool, conv, residual add,
// adaptive average pool, a fixed weighted sum) on input x and weights w1, w2: the outputs, the
// gradients of sum(out^2), and the intermediate activations (to check their format).
struct CnnRun {
  std::vector<double> out, gx, gw1, gw2, gbn;
  std::vector<Tensor> intermediates;
};

inline CnnRun run_cnn(bool channels_last, Device dev) {
  const Tensor x0 = rnd({2, 3, 10, 10}, 1, 2.0, dev);
  Tensor w1 = rnd({8, 3, 3, 3}, 2, 0.3, dev);
  Tensor w2 = rnd({8, 8, 3, 3}, 3, 0.1, dev);
  Tensor gamma = add(mul(arange(0, 8), 0.1), 0.5).to(dev), beta = mul(arange(0, 8), -0.05).to(dev);
  Tensor x = x0;
  if (channels_last) {
    x = x.contiguous(MemoryFormat::channels_last);
    w1 = w1.contiguous(MemoryFormat::channels_last);
    w2 = w2.contiguous(MemoryFormat::channels_last);
  }
  for (Tensor* t : {&x, &w1, &w2, &gamma}) t->requires_grad_(true);
  CnnRun r;
  Tensor rm = zeros({8}, {.device = dev}), rv = ones({8}, {.device = dev});
  Tensor h = conv2d(x, w1, Tensor(), {.padding = {1, 1}});
  r.intermediates.push_back(h);
  h = batch_norm(h, rm, rv, gamma, beta, true, 0.1, 1e-5);
  r.intermediates.push_back(h);
  h = relu(h);
  r.intermediates.push_back(h);
  h = max_pool2d(h, {.kernel = {2, 2}});
  r.intermediates.push_back(h);
  const Tensor skip = h;
  h = add(conv2d(h, w2, Tensor(), {.padding = {1, 1}}), skip);
  r.intermediates.push_back(h);
  h = adaptive_avg_pool2d(h, {2, 2});
  r.intermediates.push_back(h);
  const Tensor out = sum(mul(h.flatten(1), arange(0, 32, 1, {.device = dev})), {1});
  r.out = vec(out);
  sum(mul(out, out)).backward();
  r.gx = vec(x.grad());
  r.gw1 = vec(w1.grad());
  r.gw2 = vec(w2.grad());
  r.gbn = vec(gamma.grad());
  return r;
}


}  // namespace ember::testing
