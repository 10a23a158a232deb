// Gradcheck cases for pooling (max, avg, adaptive avg), batch norm and dropout.
// Max pool inputs are made all-distinct (spaced 2 / n apart) so no window has a tie that the
// finite differences could cross.

#include <algorithm>
#include <numeric>

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

// Replaces input 0's values by -1 + 2 * rank / n: the same order, every pair >= 2 / n apart.
void distinct(V& in) {
  Tensor& t = in[0];
  double* p = t.data_ptr<double>();
  const int64_t n = t.numel();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] < p[b]; });
  for (int64_t r = 0; r < n; ++r) p[order[static_cast<size_t>(r)]] = -1.0 + 2.0 * static_cast<double>(r) / n;
}

Pool2dOptions pool(std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride = {0, 0},
                   std::pair<int64_t, int64_t> padding = {0, 0}, std::pair<int64_t, int64_t> dilation = {1, 1},
                   bool ceil_mode = false, bool count_include_pad = true) {
  return {.kernel = kernel, .stride = stride, .padding = padding, .dilation = dilation, .ceil_mode = ceil_mode,
          .count_include_pad = count_include_pad};
}

// Fixed running statistics for eval-mode cases (not differentiated).
Tensor stat(std::vector<double> v) { return from_vector<double>(v, {.dtype = DType::f64}).to(case_device()); }
}  // namespace

void add_pool_norm_cases(std::vector<OpCase>& c) {
  // ---- max pool ----
  c.push_back({.name = "max_pool2d/channels_last", .inputs = {{2, 3, 6, 5}},
               .fn = [](const V& x) {
                 return expect_channels_last(max_pool2d(channels_last(x[0]), pool({3, 3}, {2, 2}, {1, 1})),
                                             "max_pool2d");
               },
               .prepare = distinct});
  c.push_back({.name = "avg_pool2d/channels_last", .inputs = {{2, 3, 5, 6}},
               .fn = [](const V& x) {
                 return expect_channels_last(avg_pool2d(channels_last(x[0]), pool({2, 3}, {1, 2}, {1, 1})),
                                             "avg_pool2d");
               }});
  c.push_back({.name = "adaptive_avg_pool2d/channels_last", .inputs = {{2, 3, 5, 4}},
               .fn = [](const V& x) {
                 return expect_channels_last(adaptive_avg_pool2d(channels_last(x[0]), {2, 3}), "adaptive_avg_pool2d");
               }});
  c.push_back({.name = "max_pool2d/basic", .inputs = {{2, 2, 4, 6}},
               .fn = [](const V& x) { return max_pool2d(x[0], pool({2, 2})); }, .prepare = distinct});
  c.push_back({.name = "max_pool2d/pad_stride", .inputs = {{1, 2, 6, 7}},
               .fn = [](const V& x) { return max_pool2d(x[0], pool({3, 2}, {2, 1}, {1, 1})); }, .prepare = distinct});
  c.push_back({.name = "max_pool2d/dilation", .inputs = {{1, 2, 7, 8}},
               .fn = [](const V& x) { return max_pool2d(x[0], pool({3, 3}, {1, 2}, {1, 1}, {2, 2})); },
               .prepare = distinct});
  c.push_back({.name = "max_pool2d/ceil_mode", .inputs = {{2, 1, 6, 5}},
               .fn = [](const V& x) { return max_pool2d(x[0], pool({3, 2}, {2, 2}, {1, 0}, {1, 1}, true)); },
               .prepare = distinct});
  c.push_back({.name = "max_pool2d/overlap_unbatched", .inputs = {{2, 5, 5}},
               .fn = [](const V& x) { return max_pool2d(x[0], pool({3, 3}, {1, 1})); }, .prepare = distinct});

  // ---- avg pool ----
  c.push_back({.name = "avg_pool2d/include_pad", .inputs = {{2, 2, 5, 5}},
               .fn = [](const V& x) { return avg_pool2d(x[0], pool({3, 3}, {2, 2}, {1, 1})); }});
  c.push_back({.name = "avg_pool2d/exclude_pad", .inputs = {{2, 2, 5, 5}},
               .fn = [](const V& x) { return avg_pool2d(x[0], pool({3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false)); }});
  c.push_back({.name = "avg_pool2d/ceil_include_pad", .inputs = {{1, 2, 5, 6}},
               .fn = [](const V& x) { return avg_pool2d(x[0], pool({2, 3}, {2, 2}, {1, 1}, {1, 1}, true, true)); }});
  c.push_back({.name = "avg_pool2d/ceil_exclude_pad", .inputs = {{1, 2, 5, 6}},
               .fn = [](const V& x) { return avg_pool2d(x[0], pool({2, 3}, {2, 2}, {1, 1}, {1, 1}, true, false)); }});

  // ---- adaptive avg pool: non-divisible sizes give overlapping, unequal cells ----
  c.push_back({.name = "adaptive_avg_pool2d/5x7_to_3x4", .inputs = {{2, 2, 5, 7}},
               .fn = [](const V& x) { return adaptive_avg_pool2d(x[0], {3, 4}); }});
  c.push_back({.name = "adaptive_avg_pool2d/upsample", .inputs = {{1, 2, 3, 2}},
               .fn = [](const V& x) { return adaptive_avg_pool2d(x[0], {4, 3}); }});
  c.push_back({.name = "adaptive_avg_pool2d/global", .inputs = {{2, 3, 4, 5}},
               .fn = [](const V& x) { return adaptive_avg_pool2d(x[0], {1, 1}); }});

  // ---- batch norm ----
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

  // ---- batch norm with a fused ReLU (and residual add) ----
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

  // ---- dropout: the Generator is created inside fn, so every call draws the same mask ----
  c.push_back({.name = "dropout/train", .inputs = {{4, 5}},
               .fn = [](const V& x) {
                 Generator gen(42);
                 return dropout(x[0], 0.3, true, gen);
               }});
  c.push_back({.name = "dropout/chain", .inputs = {{3, 4}},
               .fn = [](const V& x) {
                 Generator gen(7);
                 return dropout(tanh(x[0]), 0.5, true, gen) * 2.0;
               }});
}

}  // namespace ember::testing
