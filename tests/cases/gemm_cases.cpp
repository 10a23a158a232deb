// Gradcheck cases for the matrix products: mm, bmm, matmul (every NumPy shape rule), linear.
// Cases that transpose an input inside `fn` exercise the no-copy CblasTrans path; the strided
// variant of every case (tests/test_gradcheck.cpp) exercises the copy-to-contiguous path.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;
}  // namespace

void add_gemm_cases(std::vector<OpCase>& c) {
  // ---- mm -----------------------------------------------------------------------------------
  c.push_back({.name = "mm/basic", .inputs = {{3, 4}, {4, 5}}, .fn = [](const V& x) { return mm(x[0], x[1]); }});
  c.push_back({.name = "mm/a_transposed", .inputs = {{4, 3}, {4, 5}},
               .fn = [](const V& x) { return mm(x[0].t(), x[1]); }});
  c.push_back({.name = "mm/b_transposed", .inputs = {{3, 4}, {5, 4}},
               .fn = [](const V& x) { return mm(x[0], x[1].t()); }});
  c.push_back({.name = "mm/both_transposed", .inputs = {{4, 3}, {5, 4}},
               .fn = [](const V& x) { return mm(x[0].t(), x[1].t()); }});
  c.push_back({.name = "mm/outer_k1", .inputs = {{3, 1}, {1, 4}}, .fn = [](const V& x) { return mm(x[0], x[1]); }});
  c.push_back({.name = "mm/row_times_column", .inputs = {{1, 5}, {5, 1}}, .fn = [](const V& x) { return mm(x[0], x[1]); }});
  c.push_back({.name = "mm/same_input_twice", .inputs = {{4, 4}}, .fn = [](const V& x) { return mm(x[0], x[0].t()); }});
  c.push_back({.name = "mm/chain", .inputs = {{2, 3}, {3, 4}, {4, 2}},
               .fn = [](const V& x) { return mm(mm(x[0], x[1]), x[2]); }});

  // ---- bmm ----------------------------------------------------------------------------------
  c.push_back({.name = "bmm/basic", .inputs = {{2, 3, 4}, {2, 4, 5}}, .fn = [](const V& x) { return bmm(x[0], x[1]); }});
  c.push_back({.name = "bmm/transposed", .inputs = {{2, 4, 3}, {2, 5, 4}},
               .fn = [](const V& x) { return bmm(x[0].transpose(1, 2), x[1].transpose(-1, -2)); }});
  c.push_back({.name = "bmm/permuted_batch", .inputs = {{3, 2, 4}, {2, 4, 3}},
               .fn = [](const V& x) { return bmm(x[0].permute({1, 0, 2}), x[1]); }});

  // ---- matmul: NumPy shape rules --------------------------------------------------------------
  c.push_back({.name = "matmul/dot", .inputs = {{5}, {5}}, .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/vec_mat", .inputs = {{4}, {4, 3}}, .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/mat_vec", .inputs = {{3, 4}, {4}}, .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/mat_mat", .inputs = {{3, 4}, {4, 2}}, .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/batched_vec", .inputs = {{2, 3, 4}, {4}},
               .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/vec_batched", .inputs = {{4}, {2, 4, 3}},
               .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/3d_2d_folded", .inputs = {{2, 3, 4}, {4, 5}},
               .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/3d_2d_transposed_weight", .inputs = {{2, 3, 4}, {5, 4}},
               .fn = [](const V& x) { return matmul(x[0], x[1].t()); }});
  c.push_back({.name = "matmul/2d_3d", .inputs = {{3, 4}, {2, 4, 5}}, .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/broadcast_batch", .inputs = {{2, 1, 3, 4}, {3, 4, 2}},
               .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/broadcast_batch_both", .inputs = {{2, 1, 3, 4}, {1, 3, 4, 2}},
               .fn = [](const V& x) { return matmul(x[0], x[1]); }});
  c.push_back({.name = "matmul/broadcast_batch_transposed", .inputs = {{2, 1, 4, 3}, {3, 2, 4}},
               .fn = [](const V& x) { return matmul(x[0].transpose(-1, -2), x[1].transpose(-1, -2)); }});

  // ---- linear -------------------------------------------------------------------------------
  c.push_back({.name = "linear/bias", .inputs = {{5, 4}, {3, 4}, {3}},
               .fn = [](const V& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({.name = "linear/no_bias", .inputs = {{5, 4}, {3, 4}}, .fn = [](const V& x) { return linear(x[0], x[1]); }});
  c.push_back({.name = "linear/3d_input", .inputs = {{2, 3, 4}, {5, 4}, {5}},
               .fn = [](const V& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({.name = "linear/1d_input", .inputs = {{4}, {3, 4}, {3}},
               .fn = [](const V& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({.name = "linear/transposed_input_and_weight", .inputs = {{4, 5}, {4, 3}, {3}},
               .fn = [](const V& x) { return linear(x[0].t(), x[1].t(), x[2]); }});
  c.push_back({.name = "linear/then_tanh", .inputs = {{3, 4}, {2, 4}, {2}},
               .fn = [](const V& x) { return tanh(linear(x[0], x[1], x[2])); }});
}

}  // namespace ember::testing
