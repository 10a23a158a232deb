// Gradcheck cases for batch norm, plain and with a fused ReLU (and residual add).

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

// Fixed running statistics for eval-mode cases (not differentiated).
Tensor stat(std::vector<double> v) { return from_vector<double>(v, {.dtype = DType::f64}).to(case_device()); }
}  // namespace

void add_batchnorm_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "batch_norm/train_affine_4d", .inputs = {{4, 3, 2, 3}, {3}, {3}},
               .fn = [](const V& x) {
                 // Fresh buffers every call: the in-place update must not disturb the gradient.
                 Tensor rm = zeros({3}, {.dtype = DType::f64, .device = case_device()}),
                        rv = ones({3}, {.dtype = DType::f64, .device = case_device()});
                 return batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
               },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm/train_affine_channels_last", .inputs = {{4, 3, 2, 3}, {3}, {3}},
               .fn = [](const V& x) {
                 Tensor rm = zeros({3}, {.dtype = DType::f64, .device = case_device()}),
                        rv = ones({3}, {.dtype = DType::f64, .device = case_device()});
                 return expect_channels_last(batch_norm(channels_last(x[0]), rm, rv, x[1], x[2], true, 0.1, 1e-5),
                                             "batch_norm");
               },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm/train_plain_2d", .inputs = {{5, 3}},
               .fn = [](const V& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm/train_weight_only_3d", .inputs = {{2, 3, 4}, {3}},
               .fn = [](const V& x) {
                 Tensor rm = zeros({3}, {.dtype = DType::f64, .device = case_device()}),
                        rv = ones({3}, {.dtype = DType::f64, .device = case_device()});
                 return batch_norm(x[0], rm, rv, x[1], Tensor(), true, 0.2);
               },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm/eval_affine", .inputs = {{3, 2, 2, 2}, {2}, {2}},
               .fn = [](const V& x) {
                 return batch_norm(x[0], stat({0.1, -0.2}), stat({0.5, 2.0}), x[1], x[2], false);
               }});

  // with a fused ReLU (and residual add)
  c.push_back({.name = "batch_norm_relu/train_residual_4d", .inputs = {{4, 3, 2, 3}, {3}, {3}, {4, 3, 2, 3}},
               .fn = [](const V& x) {
                 Tensor rm = zeros({3}, {.dtype = DType::f64, .device = case_device()}),
                        rv = ones({3}, {.dtype = DType::f64, .device = case_device()});
                 return batch_norm_relu(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5, x[3]);
               },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm_relu/train_channels_last", .inputs = {{4, 3, 2, 3}, {3}, {3}},
               .fn = [](const V& x) {
                 return expect_channels_last(
                     batch_norm_relu(channels_last(x[0]), Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-5),
                     "batch_norm_relu");
               },
               .tol = 1e-5});
  c.push_back({.name = "batch_norm_relu/eval_residual", .inputs = {{3, 2, 2, 2}, {2}, {2}, {3, 2, 2, 2}},
               .fn = [](const V& x) {
                 return batch_norm_relu(x[0], stat({0.1, -0.2}), stat({0.5, 2.0}), x[1], x[2], false, 0.1, 1e-5,
                                        x[3]);
               }});
}

}  // namespace ember::testing
