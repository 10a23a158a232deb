#pragma once
// nn::init: in-place initializers with PyTorch's formulas. Randomness comes from the given
// Philox generator (default: the global one, seeded by manual_seed), so the same seed gives the
// same initial weights on every device.

#include "../core/generator.h"
#include "../core/tensor.h"

namespace ember::nn::init {

enum class Nonlinearity { Linear, ReLU, LeakyReLU, Tanh, Sigmoid };
enum class FanMode { FanIn, FanOut };

// (fan_in, fan_out) of a weight: (in, out) for Linear (out, in); in*k*k, out*k*k for conv.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& w);
// The recommended gain: 1 linear/sigmoid, 5/3 tanh, sqrt(2) relu, sqrt(2 / (1 + a^2)) leaky.
double calculate_gain(Nonlinearity nl, double a = 0.01);

Tensor& uniform_(Tensor& t, double lo = 0.0, double hi = 1.0, Generator& gen = default_generator());
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// U(-b, b) with b = gain * sqrt(3 / fan); gain from nonlinearity (a = negative slope).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                         Nonlinearity nl = Nonlinearity::LeakyReLU, Generator& gen = default_generator());
// N(0, std) with std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nl = Nonlinearity::LeakyReLU, Generator& gen = default_generator());
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator& gen = default_generator());
// N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator& gen = default_generator());

}  // namespace ember::nn::init
