// Gradcheck cases for the losses. Targets, weights and ignore
// indices are fixed values built inside each case (they are not differentiable).

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

Tensor labels(const std::vector<int64_t>& v, const Shape& shape) {
  return from_vector<int64_t>(v, shape).to(case_device());
}
Tensor weights(const std::vector<double>& v) { return from_vector<double>(v).to(case_device()); }
}  // namespace

void add_loss_cases(std::vector<OpCase>& c) {
  // ---- cross_entropy ----
  c.push_back({.name = "cross_entropy/mean", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 3, 4, 1}, {4}));
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/sum", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({2, 2, 0, 4}, {4}), {.reduction = Reduction::Sum});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/none", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({1, 0, 4, 3}, {4}), {.reduction = Reduction::None});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/weight_mean", .inputs = {{4, 3}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 2, 2, 1}, {4}), {.weight = weights({0.5, 2.0, 1.5})});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/ignore_index_weight_mean", .inputs = {{5, 3}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, -100, 2, 1, -100}, {5}), {.weight = weights({0.5, 2.0, 1.5})});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/ignore_index_in_range_none", .inputs = {{4, 3}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 1, 2, 1}, {4}), {.reduction = Reduction::None, .ignore_index = 1});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/smoothing_mean", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 3, 4, 1}, {4}), {.label_smoothing = 0.1});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/smoothing_weight_ignore_mean", .inputs = {{5, 4}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({3, 0, -1, 2, 1}, {5}),
                                      {.weight = weights({1.0, 0.25, 3.0, 0.5}), .ignore_index = -1,
                                       .label_smoothing = 0.3});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/smoothing_weight_none", .inputs = {{3, 4}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({3, 0, 2}, {3}),
                                      {.weight = weights({1.0, 0.25, 3.0, 0.5}), .reduction = Reduction::None,
                                       .label_smoothing = 0.2});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/4d_mean", .inputs = {{2, 3, 2, 2}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 1, 2, 1, 2, 2, 0, 1}, {2, 2, 2}));
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/4d_weight_ignore_smoothing", .inputs = {{2, 3, 2, 2}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, -100, 2, 1, 2, 2, -100, 1}, {2, 2, 2}),
                                      {.weight = weights({2.0, 1.0, 0.5}), .label_smoothing = 0.25});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/3d_none", .inputs = {{2, 4, 3}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({0, 3, 2, 1, 1, 0}, {2, 3}), {.reduction = Reduction::None});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/unbatched", .inputs = {{5}}, .fn = [](const V& x) {
                 return cross_entropy(x[0], labels({3}, {}), {.label_smoothing = 0.1});
               }, .lo = -2, .hi = 2});

  // Class-probability targets (Note [Soft-target cross-entropy]): a Mixup-style two-class mix.
  auto probs = [](const std::vector<double>& v, const Shape& shape) {
    return from_vector<double>(v, shape).to(case_device());
  };
  c.push_back({.name = "cross_entropy/probs_mean", .inputs = {{3, 4}}, .fn = [=](const V& x) {
                 return cross_entropy(x[0], probs({0, 0.6, 0.4, 0, 1, 0, 0, 0, 0.25, 0, 0, 0.75}, {3, 4}));
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/probs_smoothing_weight_sum", .inputs = {{3, 4}}, .fn = [=](const V& x) {
                 return cross_entropy(x[0], probs({0, 0.6, 0.4, 0, 1, 0, 0, 0, 0.25, 0, 0, 0.75}, {3, 4}),
                                      {.weight = weights({1.0, 0.5, 2.0, 1.5}), .reduction = Reduction::Sum,
                                       .label_smoothing = 0.1});
               }, .lo = -2, .hi = 2});
  c.push_back({.name = "cross_entropy/probs_smoothing_none", .inputs = {{2, 3}}, .fn = [=](const V& x) {
                 return cross_entropy(x[0], probs({0.2, 0.8, 0, 0, 0.5, 0.5}, {2, 3}),
                                      {.reduction = Reduction::None, .label_smoothing = 0.2});
               }, .lo = -2, .hi = 2});

  // ---- nll_loss ----
  c.push_back({.name = "nll_loss/mean", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return nll_loss(x[0], labels({0, 3, 4, 1}, {4}));
               }});
  c.push_back({.name = "nll_loss/weight_ignore_mean", .inputs = {{5, 3}}, .fn = [](const V& x) {
                 return nll_loss(x[0], labels({0, -100, 2, 1, 2}, {5}), {.weight = weights({0.5, 2.0, 1.5})});
               }});
  c.push_back({.name = "nll_loss/none", .inputs = {{4, 3}}, .fn = [](const V& x) {
                 return nll_loss(x[0], labels({2, 0, 1, 2}, {4}), {.reduction = Reduction::None});
               }});
  c.push_back({.name = "nll_loss/4d_sum", .inputs = {{2, 3, 2, 2}}, .fn = [](const V& x) {
                 return nll_loss(x[0], labels({0, 1, 2, 1, 2, 2, 0, 1}, {2, 2, 2}),
                                 {.weight = weights({2.0, 1.0, 0.5}), .reduction = Reduction::Sum});
               }});
  c.push_back({.name = "nll_loss/of_log_softmax", .inputs = {{4, 5}}, .fn = [](const V& x) {
                 return nll_loss(log_softmax(x[0], 1), labels({0, 3, 4, 1}, {4}), {.weight = weights({1, 2, 3, 4, 5})});
               }});

  // ---- mse_loss ----
  c.push_back({.name = "mse_loss/mean", .inputs = {{3, 4}, {3, 4}}, .fn = [](const V& x) { return mse_loss(x[0], x[1]); }});
  c.push_back({.name = "mse_loss/sum", .inputs = {{3, 4}, {3, 4}},
               .fn = [](const V& x) { return mse_loss(x[0], x[1], Reduction::Sum); }});
  c.push_back({.name = "mse_loss/none", .inputs = {{2, 3, 2}, {2, 3, 2}},
               .fn = [](const V& x) { return mse_loss(x[0], x[1], Reduction::None); }});
}

}  // namespace ember::testing
