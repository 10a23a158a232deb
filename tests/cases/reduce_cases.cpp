// Gradcheck cases for reductions: sum, mean, var, amax/amin, max/min (all elements and along a
// dim). Random inputs have no ties; the tied cases make pairs of exactly equal elements, where
// the central difference sees half the gradient on each — what the even split gives.

#include <algorithm>

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

// In every row (last dim, size >= 5): elements 0 and 1 become an exact tie for the max, 2 and 3
// an exact tie for the min, each 0.1 beyond the rest so the finite differences never cross it.
void make_tied_pairs(V& in) {
  Tensor& t = in[0];
  double* p = t.data_ptr<double>();
  const int64_t row = t.shape().back(), rows = t.numel() / row;
  for (int64_t r = 0; r < rows; ++r) {
    double* q = p + r * row;
    double hi = q[0], lo = q[0];
    for (int64_t j = 0; j < row; ++j) hi = std::max(hi, q[j]), lo = std::min(lo, q[j]);
    q[0] = q[1] = hi + 0.1;  // a tied max
    q[2] = q[3] = lo - 0.1;  // a tied min
  }
}
}  // namespace

void add_reduce_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "sum/all", .inputs = {{3, 4}}, .fn = [](const V& x) { return sum(x[0]); }});
  c.push_back({.name = "sum/dims_keepdim", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return sum(x[0], {0, -1}, true); }});
  c.push_back({.name = "mean/dim", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return mean(x[0], {1}); }});
  c.push_back({.name = "mean/neg_dims_keepdim", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return mean(x[0], {-1, -3}, true); }});

  c.push_back({.name = "var/all", .inputs = {{3, 4}}, .fn = [](const V& x) { return var(x[0]); }});
  c.push_back({.name = "var/dim", .inputs = {{3, 5}}, .fn = [](const V& x) { return var(x[0], {1}); }});
  c.push_back({.name = "var/dim0_keepdim", .inputs = {{4, 3}}, .fn = [](const V& x) { return var(x[0], {0}, 1, true); }});
  c.push_back({.name = "var/neg_dims", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return var(x[0], {-1, 0}); }});
  c.push_back({.name = "var/correction0", .inputs = {{3, 4}}, .fn = [](const V& x) { return var(x[0], {1}, 0); }});
  c.push_back({.name = "var/correction2_keepdim", .inputs = {{2, 5}},
               .fn = [](const V& x) { return var(x[0], {-1}, 2, true); }});

  c.push_back({.name = "amax/all", .inputs = {{3, 4}}, .fn = [](const V& x) { return amax(x[0]); }});
  c.push_back({.name = "amax/dim", .inputs = {{3, 4}}, .fn = [](const V& x) { return amax(x[0], {1}); }});
  c.push_back({.name = "amax/neg_dims_keepdim", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return amax(x[0], {-1, 0}, true); }});
  c.push_back({.name = "amin/dim0", .inputs = {{3, 4}}, .fn = [](const V& x) { return amin(x[0], {0}); }});
  c.push_back({.name = "amin/dims_keepdim", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return amin(x[0], {1, 2}, true); }});
  // Ties: the even split (1/2 each) equals the central difference at a tied pair.
  c.push_back({.name = "amax/tied", .inputs = {{3, 6}}, .fn = [](const V& x) { return amax(x[0], {-1}); },
               .prepare = make_tied_pairs});
  c.push_back({.name = "amin/tied", .inputs = {{3, 6}}, .fn = [](const V& x) { return amin(x[0], {1}, true); },
               .prepare = make_tied_pairs});
  c.push_back({.name = "max/all_tied", .inputs = {{1, 6}}, .fn = [](const V& x) { return max(x[0]); },
               .prepare = make_tied_pairs});

  c.push_back({.name = "max/all", .inputs = {{3, 4}}, .fn = [](const V& x) { return max(x[0]); }});
  c.push_back({.name = "min/all", .inputs = {{2, 3, 2}}, .fn = [](const V& x) { return min(x[0]); }});
  c.push_back({.name = "max/dim", .inputs = {{3, 5}}, .fn = [](const V& x) { return max(x[0], 1).first; }});
  c.push_back({.name = "max/dim0_keepdim", .inputs = {{4, 3}}, .fn = [](const V& x) { return max(x[0], 0, true).first; }});
  c.push_back({.name = "max/neg_dim_3d", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return max(x[0], -2).first; }});
  c.push_back({.name = "min/dim", .inputs = {{3, 5}}, .fn = [](const V& x) { return min(x[0], -1).first; }});
  c.push_back({.name = "min/dim_keepdim_3d", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return min(x[0], 2, true).first; }});
  c.push_back({.name = "chain/softmax_by_hand", .inputs = {{3, 4}}, .fn = [](const V& x) {
                 // exp(x - amax) / sum: amax's gradient cancels out analytically, but each piece runs.
                 Tensor e = exp(x[0] - amax(x[0], {1}, true));
                 return e / sum(e, {1}, true);
               }});
}

}  // namespace ember::testing
