#include "init.h"

#include <cmath>

#include "../core/autograd.h"

namespace ember::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& w) {
  EMBER_CHECK(w.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dimensions, got ", w.shape());
  int64_t receptive = 1;
  for (int d = 2; d < w.dim(); ++d) receptive *= w.shape()[d];
  return {w.shape()[1] * receptive, w.shape()[0] * receptive};
}

double calculate_gain(Nonlinearity nl, double a) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + a * a));
  }
  return 1.0;
}

Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  NoGradGuard g;
  return ember::uniform_(t, lo, hi, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  NoGradGuard g;
  return ember::normal_(t, mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard g;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

namespace {
int64_t pick_fan(const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? fan_in : fan_out;
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  const double bound = calculate_gain(nl, a) * std::sqrt(3.0 / static_cast<double>(pick_fan(t, mode)));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  const double std = calculate_gain(nl, a) / std::sqrt(static_cast<double>(pick_fan(t, mode)));
  return init::normal_(t, 0.0, std, gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator& gen) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator& gen) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

}  // namespace ember::nn::init
