// Gradcheck cases for joining, splitting and indexing: cat, stack, split, chunk, index_select,
// gather, scatter_add. Indices repeat on purpose, so the backward scatters must accumulate.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return from_vector<int64_t>(v, shape).to(case_device());
}
Tensor i32(const std::vector<int32_t>& v, const Shape& shape) {
  return from_vector<int32_t>(v, shape).to(case_device());
}

// Pieces weighted differently and joined again, so each piece's gradient is distinguishable.
Tensor rejoin(const std::vector<Tensor>& parts, int64_t dim) {
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < parts.size(); ++i) scaled.push_back(exp(parts[i]) * static_cast<double>(i + 1));
  return cat(scaled, dim);
}
}  // namespace

void add_index_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "cat/dim0", .inputs = {{2, 3}, {1, 3}, {4, 3}},
               .fn = [](const V& x) { return cat({x[0], x[1], x[2]}, 0); }});
  c.push_back({.name = "cat/neg_dim_with_constant", .inputs = {{2, 1, 3}, {2, 2, 3}},
               .fn = [](const V& x) {
                 Tensor k = full({2, 2, 3}, 0.5, {.dtype = DType::f64, .device = case_device()});
                 return exp(cat({x[0], k, x[1]}, -2));
               }});
  c.push_back({.name = "cat/same_input_twice", .inputs = {{2, 3}},
               .fn = [](const V& x) { return cat({x[0], x[0] * 2.0}, 1); }});
  c.push_back({.name = "stack/dim1", .inputs = {{2, 3}, {2, 3}, {2, 3}},
               .fn = [](const V& x) { return stack({x[0], x[1], x[2]}, 1); }});
  c.push_back({.name = "stack/last", .inputs = {{3}, {3}},
               .fn = [](const V& x) { return stack({x[0], x[1]}, -1); }});
  c.push_back({.name = "split/size", .inputs = {{7, 3}},
               .fn = [](const V& x) { return rejoin(split(x[0], 3, 0), 0); }});
  c.push_back({.name = "split/sizes", .inputs = {{3, 6}},
               .fn = [](const V& x) { return rejoin(split(x[0], std::vector<int64_t>{1, 3, 2}, 1), 1); }});
  c.push_back({.name = "split/one_piece_used", .inputs = {{6, 2}},
               .fn = [](const V& x) { return split(x[0], 4, 0)[1] * 3.0; }});
  c.push_back({.name = "chunk/uneven", .inputs = {{5, 4}},
               .fn = [](const V& x) { return rejoin(chunk(x[0], 3, 0), 0); }});

  c.push_back({.name = "index_select/dim1_repeats", .inputs = {{4, 5}},
               .fn = [](const V& x) { return index_select(x[0], 1, i64({4, 0, 2, 2}, {4})); }});
  c.push_back({.name = "index_select/dim0_int32", .inputs = {{3, 2, 4}},
               .fn = [](const V& x) { return index_select(x[0], 0, i32({2, 2, 0}, {3})); }});
  c.push_back({.name = "index_select/middle", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return index_select(x[0], -2, i64({1, 1, 2, 0, 1}, {5})); }});

  c.push_back({.name = "gather/dim1", .inputs = {{3, 4}},
               .fn = [](const V& x) { return gather(x[0], 1, i64({0, 3, 3, 1, 2, 2}, {3, 2})); }});
  c.push_back({.name = "gather/dim0_smaller_index", .inputs = {{3, 4}},
               .fn = [](const V& x) { return gather(x[0], 0, i32({2, 0, 1, 2, 2, 2}, {2, 3})); }});
  c.push_back({.name = "gather/3d", .inputs = {{2, 3, 2}},
               .fn = [](const V& x) { return gather(x[0], 1, i64({0, 1, 2, 2, 1, 0, 0, 0}, {2, 2, 2})); }});

  c.push_back({.name = "scatter_add/dim1_smaller_index", .inputs = {{3, 5}, {3, 4}},
               .fn = [](const V& x) { return scatter_add(x[0], 1, i64({0, 4, 4, 1, 2, 2}, {3, 2}), x[1]); }});
  c.push_back({.name = "scatter_add/dim0", .inputs = {{3, 5}, {2, 5}},
               .fn = [](const V& x) {
                 return scatter_add(x[0], 0, i64({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5}), x[1]);
               }});
}

}  // namespace ember::testing
