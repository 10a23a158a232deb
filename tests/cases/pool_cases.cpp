// Gradcheck cases for pooling (max, avg, adaptive avg). Max pool inputs are made all-distinct
// (spaced 2 / n apart) so no window has a tie that the finite differences could cross.

#include <algorithm>
#include <numeric>

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

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
}  // namespace

void add_pool_cases(std::vector<OpCase>& c) {
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
}

}  // namespace ember::testing
