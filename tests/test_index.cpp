// Known-value, edge-case and error tests for joining, splitting and indexing (layers/index.h).

#include <catch2/catch.hpp>
#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;

// ---- cat / stack ------------------------------------------------------------------------------------

TEST_CASE("cat: along dim 0 and dim 1, gradients are the slices", "[index]") {
  Tensor a = f64({1, 2, 3, 4}, {2, 2}, true), b = f64({5, 6}, {1, 2}, true), c = f64({7, 8}, {2, 1}, true);
  Tensor r0 = cat({a, b}, 0);
  CHECK(r0.shape() == Shape{3, 2});
  CHECK(vec(r0) == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor r1 = cat({a, c}, -1);
  CHECK(r1.shape() == Shape{2, 3});
  CHECK(vec(r1) == std::vector<double>{1, 2, 7, 3, 4, 8});
  // Weights 1..6 over r0: a gets 1..4, b gets 5, 6.
  sum(r0 * f64({1, 2, 3, 4, 5, 6}, {3, 2})).backward();
  CHECK(vec(a.grad()) == std::vector<double>{1, 2, 3, 4});
  CHECK(vec(b.grad()) == std::vector<double>{5, 6});
}

TEST_CASE("cat: promotes dtypes, accepts empty pieces and strided inputs", "[index]") {
  Tensor i = from_vector<int64_t>({1, 2}, {2});
  Tensor f = from_vector<float>({0.5f}, {1});
  Tensor r = cat({i, f});
  CHECK(r.dtype() == DType::f32);
  CHECK(vec(r) == std::vector<double>{1, 2, 0.5});
  Tensor e = zeros({0, 3});
  Tensor t = arange(6, {.dtype = DType::f64}).reshape({3, 2}).t();  // (2, 3) non-contiguous
  CHECK(vec(cat({e, t, e}, 0)) == std::vector<double>{0, 2, 4, 1, 3, 5});
}

TEST_CASE("cat: errors name the op", "[index]") {
  CHECK_THAT(error_of([] { cat({}); }), Contains("cat") && Contains("non-empty"));
  CHECK_THAT(error_of([] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }),
             Contains("cat") && Contains("(2, 3)") && Contains("(2, 4)"));
  CHECK_THAT(error_of([] { cat({zeros({2, 3}), zeros({3})}, 0); }), Contains("cat") && Contains("dimensions"));
  CHECK_THAT(error_of([] { cat({zeros({2}), zeros({2})}, 1); }), Contains("cat"));
  CHECK_THAT(error_of([] { cat({scalar_tensor(1), scalar_tensor(2)}); }), Contains("cat") && Contains("zero-dim"));
}

TEST_CASE("stack: new dim at the front or inside", "[index]") {
  Tensor a = f64({1, 2}, {2}), b = f64({3, 4}, {2});
  Tensor s0 = stack({a, b});
  CHECK(s0.shape() == Shape{2, 2});
  CHECK(vec(s0) == std::vector<double>{1, 2, 3, 4});
  Tensor s1 = stack({a, b}, 1);
  CHECK(vec(s1) == std::vector<double>{1, 3, 2, 4});
  CHECK(stack({a, b}, -1).shape() == Shape{2, 2});
  CHECK_THAT(error_of([&] { stack({a, f64({1, 2, 3}, {3})}); }), Contains("stack") && Contains("(3,)"));
  CHECK_THAT(error_of([] { stack({}); }), Contains("stack"));
}

// ---- split / chunk ----------------------------------------------------------------------------------

TEST_CASE("split: by size and by sizes, pieces are views", "[index]") {
  Tensor x = arange(7, {.dtype = DType::f64});
  std::vector<Tensor> p = split(x, 3);
  REQUIRE(p.size() == 3);
  CHECK(vec(p[0]) == std::vector<double>{0, 1, 2});
  CHECK(vec(p[2]) == std::vector<double>{6});
  CHECK(p[1].is_same_storage(x));
  std::vector<Tensor> q = split(x.reshape({1, 7}), std::vector<int64_t>{2, 0, 5}, 1);
  REQUIRE(q.size() == 3);
  CHECK(q[1].shape() == Shape{1, 0});
  CHECK(vec(q[2]) == std::vector<double>{2, 3, 4, 5, 6});
  // Gradient through one piece lands in its slice only.
  Tensor leaf = f64({1, 2, 3, 4}, {4}, true);
  sum(split(leaf, 2)[1] * 3.0).backward();
  CHECK(vec(leaf.grad()) == std::vector<double>{0, 0, 3, 3});
  CHECK_THAT(error_of([&] { split(x, std::vector<int64_t>{3, 3}); }), Contains("split") && Contains("sum to 7"));
  CHECK_THAT(error_of([&] { split(x, 0); }), Contains("split") && Contains("positive"));
}

TEST_CASE("chunk: ceil-sized pieces, possibly fewer than asked", "[index]") {
  Tensor x = arange(5, {.dtype = DType::f64});
  std::vector<Tensor> c = chunk(x, 3);
  REQUIRE(c.size() == 3);
  CHECK(c[0].numel() == 2);
  CHECK(c[1].numel() == 2);
  CHECK(c[2].numel() == 1);
  CHECK(chunk(arange(6), 4).size() == 3);  // pieces of ceil(6 / 4) = 2
  CHECK(chunk(zeros({0, 2}), 3).size() == 3);
  CHECK_THAT(error_of([&] { chunk(x, 0); }), Contains("chunk"));
}

// ---- index_select / gather / scatter_add --------------------------------------------------------------

TEST_CASE("index_select: values, repeated indices accumulate in backward, int32 index", "[index]") {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  Tensor y = index_select(x, 1, i64({2, 0, 2}, {3}));
  CHECK(y.shape() == Shape{2, 3});
  CHECK(vec(y) == std::vector<double>{3, 1, 3, 6, 4, 6});
  sum(y).backward();
  CHECK(vec(x.grad()) == std::vector<double>{1, 0, 2, 1, 0, 2});
  Tensor z = index_select(x.detach(), 0, from_vector<int32_t>({1}, {1}));
  CHECK(vec(z) == std::vector<double>{4, 5, 6});
  // Integer data works too (no autograd needed).
  CHECK(index_select(i64({10, 20, 30}, {3}), 0, i64({2, 2}, {2})).to_vector<int64_t>() ==
        std::vector<int64_t>{30, 30});
  CHECK(index_select(x.detach(), 1, i64({}, {0})).shape() == Shape{2, 0});
}

TEST_CASE("index_select: errors name the op, the index and the size", "[index]") {
  Tensor x = zeros({2, 3});
  CHECK_THAT(error_of([&] { index_select(x, 1, i64({0, 3}, {2})); }),
             Contains("index_select") && Contains("index 3") && Contains("size 3"));
  CHECK_THAT(error_of([&] { index_select(x, 0, i64({-1}, {1})); }), Contains("index_select") && Contains("-1"));
  CHECK_THAT(error_of([&] { index_select(x, 0, zeros({1})); }),
             Contains("index_select") && Contains("int64 or int32") && Contains("float32"));
  CHECK_THAT(error_of([&] { index_select(x, 0, i64({0, 1}, {1, 2})); }), Contains("index_select") && Contains("1-D"));
  CHECK_THAT(error_of([&] { index_select(x, 2, i64({0}, {1})); }), Contains("index_select"));
}

TEST_CASE("gather: PyTorch's example and its backward", "[index]") {
  // torch.gather(t=[[1,2],[3,4]], 1, [[0,0],[1,0]]) = [[1,1],[4,3]]
  Tensor x = f64({1, 2, 3, 4}, {2, 2}, true);
  Tensor y = gather(x, 1, i64({0, 0, 1, 0}, {2, 2}));
  CHECK(vec(y) == std::vector<double>{1, 1, 4, 3});
  sum(y).backward();
  CHECK(vec(x.grad()) == std::vector<double>{2, 0, 1, 1});
  // An index smaller than x in the other dims, along dim 0.
  Tensor x2 = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(vec(gather(x2, 0, i64({2}, {1, 1}))) == std::vector<double>{5});
}

TEST_CASE("gather: errors", "[index]") {
  Tensor x = zeros({2, 3});
  CHECK_THAT(error_of([&] { gather(x, 1, i64({0, 5}, {2, 1})); }),
             Contains("gather") && Contains("index 5") && Contains("size 3"));
  CHECK_THAT(error_of([&] { gather(x, 1, i64({0, 1}, {2})); }), Contains("gather") && Contains("dimensions"));
  CHECK_THAT(error_of([&] { gather(x, 1, i64({0, 0, 0}, {3, 1})); }), Contains("gather") && Contains("exceeds"));
  CHECK_THAT(error_of([&] { gather(x, 1, zeros({2, 1}, {.dtype = DType::f64})); }),
             Contains("gather") && Contains("float64"));
}

TEST_CASE("scatter_add: PyTorch's example, x gets g, src gets gather(g)", "[index]") {
  // zeros(3, 5).scatter_add(0, [[0,1,2,0,0],[2,0,0,1,2]], ones(2, 5)): out[index[i][j]][j] += 1
  Tensor x = zeros({3, 5}, {.dtype = DType::f64, .requires_grad = true});
  Tensor src = ones({2, 5}, {.dtype = DType::f64, .requires_grad = true});
  Tensor index = i64({0, 1, 2, 0, 0, 2, 0, 0, 1, 2}, {2, 5});
  Tensor y = scatter_add(x, 0, index, src);
  CHECK(vec(y) == std::vector<double>{1, 1, 1, 1, 1,  //
                                      0, 1, 0, 1, 0,  //
                                      1, 0, 1, 0, 1});
  Tensor w = arange(15, {.dtype = DType::f64}).reshape({3, 5});
  sum(y * w).backward();
  CHECK(vec(x.grad()) == vec(w));
  // src[i][j] gets w[index[i][j]][j]
  CHECK(vec(src.grad()) == std::vector<double>{0, 6, 12, 3, 4, 10, 1, 2, 8, 14});
  // x itself is untouched.
  CHECK(vec(x.detach()) == std::vector<double>(15, 0.0));
}

TEST_CASE("scatter_add: repeated targets sum, src larger than index, integer dtype", "[index]") {
  Tensor x = i64({1, 1, 1}, {3});
  Tensor y = scatter_add(x, 0, i64({2, 2, 0}, {3}), i64({10, 20, 30, 99}, {4}));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{31, 1, 31});
  CHECK_THAT(error_of([&] { scatter_add(x, 0, i64({3}, {1}), i64({1}, {1})); }),
             Contains("scatter_add") && Contains("index 3") && Contains("size 3"));
  CHECK_THAT(error_of([&] { scatter_add(x, 0, i64({0}, {1}), f64({1}, {1})); }),
             Contains("scatter_add") && Contains("dtype"));
  CHECK_THAT(error_of([&] { scatter_add(x, 0, i64({0, 1}, {2}), i64({1}, {1})); }),
             Contains("scatter_add") && Contains("exceeds"));
}

// ---- one_hot ----------------------------------------------------------------------------------------

TEST_CASE("one_hot: rows, dtypes, inferred class count", "[index]") {
  Tensor h = one_hot(i64({0, 2, 1}, {3}), 3);
  CHECK(h.dtype() == DType::i64);
  CHECK(h.shape() == Shape{3, 3});
  CHECK(h.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0});
  Tensor f = one_hot(from_vector<int32_t>({1, 0, 1, 1}, {2, 2}), 2, DType::f32);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{2, 2, 2});
  CHECK(vec(f) == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 1});
  CHECK(one_hot(i64({4, 1}, {2}), -1).shape() == Shape{2, 5});
  CHECK(one_hot(i64({}, {0}), 4).shape() == Shape{0, 4});
}

TEST_CASE("one_hot: errors", "[index]") {
  CHECK_THAT(error_of([] { one_hot(i64({0, 3}, {2}), 3); }), Contains("one_hot") && Contains("label 3"));
  CHECK_THAT(error_of([] { one_hot(i64({-1}, {1}), 3); }), Contains("one_hot") && Contains("-1"));
  CHECK_THAT(error_of([] { one_hot(zeros({2}), 3); }), Contains("one_hot") && Contains("float32"));
  CHECK_THAT(error_of([] { one_hot(i64({0}, {1}), 0); }), Contains("one_hot") && Contains("num_classes"));
}

// ---- threading ----------------------------------------------------------------------------------------

TEST_CASE("index ops: large scatters are exact and do not depend on the thread count", "[index]") {
  // 200k sources scattered into 100 rows of 64: every target receives many contributions.
  const int64_t rows = 2000, cols = 64, targets = 100;
  std::vector<int64_t> idx(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>((i * 7919) % targets);
  Tensor index = i64(idx, {rows, cols});
  Tensor src = ones({rows, cols}, {.dtype = DType::f64});
  auto run = [&](int threads) {
    set_num_threads(threads);
    return vec(scatter_add(zeros({targets, cols}, {.dtype = DType::f64}), 0, index, src));
  };
  const int saved = get_num_threads();
  const std::vector<double> one = run(1), many = run(4);
  set_num_threads(saved);
  CHECK(one == many);
  // Reference count per target.
  std::vector<double> expected(static_cast<size_t>(targets * cols), 0.0);
  auto target_of = [&](size_t i) { return static_cast<size_t>(idx[i] * cols) + i % static_cast<size_t>(cols); };
  for (size_t i = 0; i < idx.size(); ++i) expected[target_of(i)] += 1;
  CHECK(one == expected);
  // gather back: every element of the gathered sums is read from the right target.
  Tensor sums = from_vector<double>(one, {targets, cols});
  Tensor g = gather(sums, 0, index);
  const std::vector<double> gv = vec(g);
  bool ok = true;
  for (size_t i = 0; i < gv.size(); ++i) ok = ok && gv[i] == expected[target_of(i)];
  CHECK(ok);
}
