// Tensors: factories, views sharing storage, copies, conversion, printing.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>

using namespace ember;

using VD = std::vector<double>;

TEST_CASE("factories: values, shapes, dtypes", "[tensor]") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({2}, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(full({3}, 2.5, {.dtype = DType::f64}).to_vector<double>() == VD{2.5, 2.5, 2.5});
  CHECK(arange(5, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, {.dtype = DType::f64}).to_vector<double>() == VD{1, 1.25, 1.5, 1.75});
  CHECK(arange(3, 0, -1, {.dtype = DType::f64}).to_vector<double>() == VD{3, 2, 1});
  CHECK(linspace(0, 1, 5, {.dtype = DType::f64}).to_vector<double>() == VD{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace(-1, 1, 1, {.dtype = DType::f64}).to_vector<double>() == VD{-1});
  CHECK(eye(3, {.dtype = DType::f64}).to_vector<double>() == VD{1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor s = scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);
  Tensor e = empty({0, 3});
  CHECK(e.numel() == 0);
  CHECK(e.sum().item() == 0.0);
  CHECK_THROWS_WITH(empty({-1}), Catch::Contains("negative dimension"));
  CHECK_THROWS_WITH(from_vector<float>({1, 2, 3}, {2, 2}), Catch::Contains("3 values do not fill shape (2, 2)"));
  CHECK_THROWS_WITH(ones({2}).item(), Catch::Contains("2 elements cannot be converted to a scalar"));
  CHECK_THROWS_WITH(arange(0, 1, 0), Catch::Contains("step must be nonzero"));
}

TEST_CASE("from_blob wraps memory without copying and runs the deleter", "[tensor]") {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  bool deleted = false;
  {
    Tensor t = from_blob(buf.data(), {2, 3}, DType::f32, Device::cpu(), [&](void*) { deleted = true; });
    t.select(0, 1).fill_(9);
    CHECK(buf == std::vector<float>{1, 2, 3, 9, 9, 9});
    Tensor strided = from_blob(buf.data(), {3}, {2}, DType::f32);
    CHECK(strided.to_vector<float>() == std::vector<float>{1, 3, 9});
  }
  CHECK(deleted);
}

TEST_CASE("views share storage: writes through a view reach the base", "[tensor]") {
  Tensor base = arange(12, {.dtype = DType::f64}).reshape({3, 4});
  Tensor row = base.select(0, 1);
  CHECK(row.is_same_storage(base));
  row.fill_(-1);
  CHECK(base.to_vector<double>() == VD{0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11});
  Tensor col = base.narrow(1, 2, 1);
  col.fill_(7);
  CHECK(base.to_vector<double>() == VD{0, 1, 7, 3, -1, -1, 7, -1, 8, 9, 7, 11});
  Tensor tr = base.t();
  CHECK(tr.shape() == Shape{4, 3});
  CHECK(!tr.is_contiguous());
  CHECK(tr.to_vector<double>() == VD{0, -1, 8, 1, -1, 9, 7, 7, 7, 3, -1, 11});
  tr.select(0, 0).fill_(5);  // writes column 0 of base
  CHECK(base.select(1, 0).to_vector<double>() == VD{5, 5, 5});
  // Versions: writes through any view bump the shared counter.
  const uint64_t v = base.version();
  row.fill_(0);
  CHECK(base.version() == v + 1);
}

TEST_CASE("view geometry: reshape, permute, slice, expand, squeeze, flatten", "[tensor]") {
  Tensor x = arange(24, {.dtype = DType::f64}).reshape({2, 3, 4});
  CHECK(x.view({6, -1}).shape() == Shape{6, 4});
  CHECK(x.view({-1}).numel() == 24);
  CHECK_THROWS_WITH(x.view({5, -1}), Catch::Contains("invalid for input of size 24"));
  CHECK_THROWS_WITH(x.view({-1, -1}), Catch::Contains("only one dimension can be -1"));
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK_THROWS_WITH(p.view({24}), Catch::Contains("use reshape() instead"));
  Tensor r = p.reshape({24});  // needs a copy
  CHECK(!r.is_same_storage(x));
  CHECK(r.to_vector<double>()[1] == 4.0);  // p[0][0][1] = x[0][1][0]
  CHECK(x.reshape({4, 6}).is_same_storage(x));  // contiguous: a view
  Tensor s = x.slice(2, 1, 4, 2);
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.to_vector<double>() == VD{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(x.slice(0, -1, 100).shape() == Shape{1, 3, 4});  // clamped like Python slicing
  CHECK(x.slice(1, 2, 1).numel() == 0);
  CHECK_THROWS_WITH(x.narrow(1, 2, 2), Catch::Contains("narrow: start 2 + length 2 exceeds dimension 1 of size 3"));
  CHECK_THROWS_WITH(x.select(0, 2), Catch::Contains("index 2 is out of range for dimension 0 of size 2"));
  Tensor one = from_vector<double>({1, 2, 3}).reshape({3, 1});
  Tensor e = one.expand({2, 3, 4});
  CHECK(e.strides() == Strides{0, 1, 0});
  CHECK(e.sum().item() == 2 * 4 * 6);
  CHECK_THROWS_WITH(one.expand({3, 2, 4}), Catch::Contains("expand"));
  CHECK(one.expand({-1, 5}).shape() == Shape{3, 5});
  CHECK(zeros({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK(zeros({1, 3, 1}).squeeze(-1).shape() == Shape{1, 3});
  CHECK(zeros({1, 3, 1}).squeeze(1).shape() == Shape{1, 3, 1});
  CHECK(zeros({3}).unsqueeze(0).unsqueeze(-1).shape() == Shape{1, 3, 1});
  CHECK(x.flatten().shape() == Shape{24});
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(x.unflatten(2, {2, 2}).shape() == Shape{2, 3, 2, 2});
  CHECK(x.transpose(0, 2).shape() == Shape{4, 3, 2});
  CHECK(x[1][2].to_vector<double>() == VD{20, 21, 22, 23});
  CHECK(scalar_tensor(1.0).reshape({1, 1}).shape() == Shape{1, 1});
  CHECK(ones({1, 1}).reshape({}).dim() == 0);
}

TEST_CASE("copies: contiguous, clone, copy_ with broadcast and dtype conversion", "[tensor]") {
  Tensor x = arange(6, {.dtype = DType::f64}).reshape({2, 3});
  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(!c.is_same_storage(x));
  CHECK(c.to_vector<double>() == VD{0, 3, 1, 4, 2, 5});
  CHECK(x.contiguous().is_same(x));
  Tensor cl = x.clone();
  cl.fill_(1);
  CHECK(x.to_vector<double>() == VD{0, 1, 2, 3, 4, 5});
  Tensor dst = zeros({2, 3}, {.dtype = DType::f32});
  dst.copy_(from_vector<int64_t>({7, 8, 9}));
  CHECK(dst.to_vector<float>() == std::vector<float>{7, 8, 9, 7, 8, 9});
  CHECK_THROWS_WITH(dst.copy_(ones({2})), Catch::Contains("copy_"));
  // Overlapping copy: x.copy_(x.t()) on a square matrix gives the transpose, not garbage.
  Tensor sq = arange(9, {.dtype = DType::f64}).reshape({3, 3});
  sq.copy_(sq.t());
  CHECK(sq.to_vector<double>() == VD{0, 3, 6, 1, 4, 7, 2, 5, 8});
  CHECK(x.to(DType::f64).is_same(x));
  CHECK(x.to(DType::i32).dtype() == DType::i32);
}

TEST_CASE("in-place arithmetic for optimizers", "[tensor]") {
  Tensor p = from_vector<float>({1, 2, 3});
  Tensor g = from_vector<float>({0.5, 0.5, 1});
  p.add_(g, -2.0);
  CHECK(p.to_vector<float>() == std::vector<float>{0, 1, 1});
  p.mul_(3.0).add_(1.0);
  CHECK(p.to_vector<float>() == std::vector<float>{1, 4, 4});
  p.div_(from_vector<float>({1, 2, 4}));
  CHECK(p.to_vector<float>() == std::vector<float>{1, 2, 1});
  p.clamp_(1.5, std::nullopt);
  CHECK(p.to_vector<float>() == std::vector<float>{1.5, 2, 1.5});
  Tensor w = ones({2}, {.requires_grad = true});
  CHECK_THROWS_WITH(w.add_(1.0), Catch::Contains("in-place operation on a tensor of shape (2,) that requires grad"));
  {
    NoGradGuard ng;
    w.add_(1.0);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("printing looks like PyTorch", "[tensor]") {
  CHECK(from_vector<float>({1, 2}).str() == "tensor([1., 2.], shape=(2,), dtype=float32, device=cpu)");
  CHECK(from_vector<double>({0.5, -1.25}).str() ==
        "tensor([ 0.5000, -1.2500], shape=(2,), dtype=float64, device=cpu)");
  CHECK(from_vector<int64_t>({3, -10}, {2, 1}).str() == "tensor([[  3],\n        [-10]], shape=(2, 1), dtype=int64, device=cpu)");
  CHECK(scalar_tensor(2.0).str() == "tensor(2., shape=(), dtype=float32, device=cpu)");
  Tensor a = ones({2}, {.requires_grad = true});
  CHECK(a.str().find("requires_grad=True") != std::string::npos);
  CHECK((a * 2.0).str().find("grad_fn=<MulBackward>") != std::string::npos);
  CHECK(from_vector<float>({NAN, INFINITY}).str().find("nan, inf") != std::string::npos);
  CHECK(from_vector<double>({1e-6, 1.0}).str().find("e-06") != std::string::npos);
  std::ostringstream os;
  os << zeros({2, 2});
  CHECK(os.str() == "tensor([[0., 0.],\n        [0., 0.]], shape=(2, 2), dtype=float32, device=cpu)");
}
