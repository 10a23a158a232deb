// Gradcheck cases for softmax and log_softmax.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;
}  // namespace

void add_softmax_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "softmax/dim1", .inputs = {{3, 5}}, .fn = [](const V& x) { return softmax(x[0], 1); }, .lo = -3, .hi = 3});
  c.push_back({.name = "softmax/dim0", .inputs = {{4, 3}}, .fn = [](const V& x) { return softmax(x[0], 0); }, .lo = -3, .hi = 3});
  c.push_back({.name = "softmax/neg_dim_3d", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return softmax(x[0], -2); },
               .lo = -3, .hi = 3});
  c.push_back({.name = "softmax/4d_channels", .inputs = {{2, 3, 2, 2}}, .fn = [](const V& x) { return softmax(x[0], 1); }});
  c.push_back({.name = "log_softmax/dim1", .inputs = {{3, 5}}, .fn = [](const V& x) { return log_softmax(x[0], 1); },
               .lo = -3, .hi = 3});
  c.push_back({.name = "log_softmax/dim0", .inputs = {{4, 3}}, .fn = [](const V& x) { return log_softmax(x[0], 0); }});
  c.push_back({.name = "log_softmax/neg_dim_3d", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return log_softmax(x[0], -1); }});
  c.push_back({.name = "log_softmax/1d", .inputs = {{6}}, .fn = [](const V& x) { return log_softmax(x[0], 0); }});
}

}  // namespace ember::testing
