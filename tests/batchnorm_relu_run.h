// batch_norm_relu against the separate ops it fuses (relu(batch_norm(x)) and
// relu(add(batch_norm(x), residual))), for the CPU tests (tests/test_batchnorm_relu.cpp) and the
// CUDA ones (tests/cuda/test_batchnorm_relu.cpp): one run returns everything the ops produce, so
// the two runs can be compared element by element.
#pragma once

#include <ember/ember.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "test_util.h"

namespace ember::testing {

struct BnReluCase {
  DType dtype = DType::f32;       // x's (and the residual's) dtype
  DType param_dtype = DType::f32;  // weight, bias, running statistics
  bool autocast = false;          // run under AutocastGuard(device, bf16)
  bool residual = false;
  bool training = true;
  bool channels_last = false;
  bool nan = false;  // a NaN in channel 2
  int64_t channels = 5;  // 16: the CUDA channels-last kernels take 16-byte packs of channels
  Device device = Device::cpu();
};

// Per-channel values: the first five as listed, then the list again with `step` added per lap.
inline std::vector<double> channel_values(std::vector<double> first, int64_t channels, double step) {
  std::vector<double> v;
  for (int64_t c = 0; c < channels; ++c)
    v.push_back(first[static_cast<size_t>(c % 5)] + step * static_cast<double>(c / 5));
  return v;
}

// The output, the gradients of x, weight, bias and the residual, and the running statistics
// afterwards.
inline std::vector<Tensor> run_bn_relu(const BnReluCase& c, bool fused) {
  const int64_t ch = c.channels, plane = 4 * 3;
  const Shape shape{2, ch, 4, 3};
  const size_t numel = static_cast<size_t>(2 * ch * plane);
  std::vector<float> xv = random_vector<float>(numel, 11);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t j = 0; j < plane; ++j)  // channel 0: -1, 0, 1 in equal numbers, so mean 0 and zeros normalize to 0
      xv[static_cast<size_t>(n * ch * plane + j)] = static_cast<float>((n * plane + j) % 3 - 1);
  if (c.nan) xv[static_cast<size_t>(2 * plane + 5)] = std::nanf("");
  const TensorOptions pon{.dtype = c.param_dtype, .device = c.device};
  Tensor x = from_vector<float>(xv, shape).to(c.device, c.dtype);
  Tensor res = from_vector<float>(random_vector<float>(numel, 12), shape).to(c.device, c.dtype);
  const Tensor r = from_vector<float>(random_vector<float>(numel, 13), shape).to(c.device, c.dtype);
  if (c.channels_last) {
    x = x.contiguous(MemoryFormat::channels_last);
    res = res.contiguous(MemoryFormat::channels_last);
  }
  x.requires_grad_(true);
  res.requires_grad_(true);
  Tensor w = from_vector<double>(channel_values({0.5, 1.5, -0.75, 1.0, 2.0}, ch, 0.125), pon).requires_grad_(true);
  Tensor b = from_vector<double>(channel_values({0.0, -0.2, 0.1, 0.3, -0.05}, ch, 0.0625), pon).requires_grad_(true);
  Tensor rm = from_vector<double>(channel_values({0.1, -0.2, 0.0, 0.3, 0.05}, ch, 0.0), pon);
  Tensor rv = from_vector<double>(channel_values({1.0, 0.5, 2.0, 0.25, 1.5}, ch, 0.25), pon);
  Tensor y;
  {
    std::optional<AutocastGuard> amp;
    if (c.autocast) amp.emplace(c.device.type, DType::bf16);
    const Tensor shortcut = c.residual ? res : Tensor();
    if (fused) {
      y = batch_norm_relu(x, rm, rv, w, b, c.training, 0.1, 1e-5, shortcut);
    } else {
      y = batch_norm(x, rm, rv, w, b, c.training, 0.1, 1e-5);
      y = relu(shortcut.defined() ? add(y, shortcut) : y);
    }
  }
  sum(mul(y, r)).backward();
  return {y, x.grad(), w.grad(), b.grad(), c.residual ? res.grad() : Tensor(), rm, rv};
}

// Element by element the same: values, NaN for NaN, and the sign of zeros.
inline bool identical(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> u = vec(a), v = vec(b);
  for (size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) != std::isnan(v[i])) return false;
    if (!std::isnan(u[i]) && (u[i] != v[i] || std::signbit(u[i]) != std::signbit(v[i]))) return false;
  }
  return true;
}

// The cases both test files run: every dtype pairing the batch norm kernels take, training and
// eval, with and without a residual, both memory formats, a NaN, and 16 channels channels-last.
inline std::vector<BnReluCase> bn_relu_cases(Device device) {
  std::vector<BnReluCase> out;
  const std::vector<std::pair<DType, DType>> pairs{{DType::f32, DType::f32},
                                                   {DType::f64, DType::f64},
                                                   {DType::bf16, DType::bf16},
                                                   {DType::f16, DType::f32}};
  for (const auto& [dt, pdt] : pairs)
    for (bool residual : {false, true})
      for (bool training : {true, false})
        for (bool cl : {false, true})
          out.push_back({.dtype = dt, .param_dtype = pdt, .autocast = pdt != dt, .residual = residual,
                         .training = training, .channels_last = cl, .device = device});
  out.push_back({.dtype = DType::bf16, .param_dtype = DType::f32, .autocast = true, .residual = true,
                 .channels_last = true, .device = device});
  out.push_back({.residual = true, .nan = true, .device = device});
  out.push_back({.channels_last = true, .nan = true, .device = device});
  // 16 channels: two 16-byte packs of 16-bit values, four of float32, eight of float64.
  for (const auto& [dt, pdt] : pairs)
    for (bool residual : {false, true})
      out.push_back({.dtype = dt, .param_dtype = pdt, .autocast = pdt != dt, .residual = residual,
                     .channels_last = true, .nan = residual, .channels = 16, .device = device});
  return out;
}

// Runs every case of bn_relu_cases(device), fused and separate, and checks that every result is
// identical; `more` adds checks of its own on a case's fused results.
inline void check_fused_equals_separate(Device device,
                                        const std::function<void(const BnReluCase&, const std::vector<Tensor>&)>& more) {
  for (const BnReluCase& c : bn_relu_cases(device)) {
    INFO("dtype " << c.dtype << " params " << c.param_dtype << " residual " << c.residual << " training "
                  << c.training << " channels_last " << c.channels_last << " nan " << c.nan << " channels " << c.channels);
    const std::vector<Tensor> fused = run_bn_relu(c, true), separate = run_bn_relu(c, false);
    const char* what[] = {"y", "grad x", "grad weight", "grad bias", "grad residual", "running mean", "running var"};
    for (size_t i = 0; i < fused.size(); ++i) {
      INFO(what[i]);
      if (fused[i].defined()) CHECK(fused[i].device() == device);
      CHECK(identical(fused[i], separate[i]));
    }
    CHECK(fused[0].suggest_memory_format() == separate[0].suggest_memory_format());
    more(c, fused);
  }
}

}  // namespace ember::testing
