#pragma once
// Known answers the softmax and loss tests share (tests/test_softmax.cpp, tests/test_loss.cpp).

namespace ember::testing {

// log(e + e^2 + e^3) = 3 + log(1 + e^-1 + e^-2) = 3.4076059644443806
inline constexpr double kLse123 = 3.4076059644443806;
inline constexpr double kLog3 = 1.0986122886681098;

}  // namespace ember::testing
