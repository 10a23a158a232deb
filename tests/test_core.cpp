// Core: dtypes and 16-bit conversion, devices, shapes, errors, the CPU allocator, Philox.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <ember/core/philox.h>
#include <ember/ember.h>

using namespace ember;

namespace {
uint16_t half_bits(float f) { return Half(f).bits; }
uint16_t bf16_bits(float f) { return BFloat16(f).bits; }
float pow2(int e) { return std::ldexp(1.0f, e); }
}  // namespace

TEST_CASE("dtype: sizes, names, promotion", "[core]") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::boolean) == 1);
  CHECK(std::string(dtype_name(DType::bf16)) == "bfloat16");
  CHECK(dtype_from_name("float64") == DType::f64);
  CHECK(dtype_from_name("long") == DType::i64);
  CHECK_THROWS_WITH(dtype_from_name("float128"), Catch::Contains("float128"));
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(promote_types(DType::i64, DType::f32) == DType::f32);
  CHECK(promote_types(DType::boolean, DType::u8) == DType::u8);
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
}

TEST_CASE("float16: round to nearest even, known bit patterns", "[core]") {
  CHECK(half_bits(1.0f) == 0x3C00);
  CHECK(half_bits(-2.0f) == 0xC000);
  CHECK(half_bits(0.1f) == 0x2E66);
  CHECK(half_bits(65504.0f) == 0x7BFF);            // largest finite
  CHECK(half_bits(65519.0f) == 0x7BFF);            // below the halfway point to 65536
  CHECK(half_bits(65520.0f) == 0x7C00);            // halfway, ties to even -> inf
  CHECK(half_bits(1e10f) == 0x7C00);
  CHECK(half_bits(-INFINITY) == 0xFC00);
  CHECK(half_bits(-0.0f) == 0x8000);
  CHECK(half_bits(pow2(-24)) == 0x0001);            // smallest subnormal
  CHECK(half_bits(pow2(-25)) == 0x0000);            // half of it: tie -> even (0)
  CHECK(half_bits(3 * pow2(-25)) == 0x0002);        // 1.5 ulps: tie -> even (2)
  CHECK(half_bits(pow2(-14)) == 0x0400);            // smallest normal
  CHECK(half_bits(1.0f + pow2(-11)) == 0x3C00);     // tie between 1 and 1+2^-10 -> even
  CHECK(half_bits(1.0f + 3 * pow2(-11)) == 0x3C02); // tie between 0x3C01 and 0x3C02 -> even
  CHECK(half_bits(1.0f + pow2(-11) + pow2(-20)) == 0x3C01);  // just above the tie
  const uint16_t nan = half_bits(NAN);
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  CHECK(Half::to_float(0x3555) == Approx(0.333251953125f));
}

TEST_CASE("float16: every finite value round-trips exactly", "[core]") {
  int checked = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = Half::to_float(h);
    if (std::isnan(f)) continue;
    REQUIRE(Half::from_float(f) == h);
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 1023);  // all but the NaNs
}

TEST_CASE("bfloat16: round to nearest even and round trip", "[core]") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits(1.0f + pow2(-8)) == 0x3F80);       // tie -> even
  CHECK(bf16_bits(1.0f + 3 * pow2(-8)) == 0x3F82);   // tie -> even (up)
  CHECK(bf16_bits(1.0f + pow2(-8) + pow2(-20)) == 0x3F81);
  CHECK(bf16_bits(-INFINITY) == 0xFF80);
  CHECK(std::isnan(BFloat16::to_float(bf16_bits(NAN))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BFloat16::to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(BFloat16::from_float(f) == b);
  }
}

TEST_CASE("tensor dtype conversion goes through the 16-bit types exactly", "[core]") {
  Tensor x = from_vector<float>({1.0f, 0.1f, 65520.0f, 1.0f + pow2(-11)});
  std::vector<float> back = x.to(DType::f16).to(DType::f32).to_vector<float>();
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == Half::to_float(0x2E66));
  CHECK(std::isinf(back[2]));
  CHECK(back[3] == 1.0f);
  std::vector<float> bb = x.to(DType::bf16).to(DType::f32).to_vector<float>();
  CHECK(bb[0] == 1.0f);
  CHECK(bb[1] == BFloat16::to_float(0x3DCD));
  // float -> int truncates toward zero; int -> bool is != 0.
  Tensor y = from_vector<double>({-1.7, 2.9, 0.0});
  CHECK(y.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{-1, 2, 0});
  CHECK(y.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, false});
}

TEST_CASE("device: parsing and the CPU-only build", "[core]") {
  CHECK(Device("cpu") == Device::cpu());
  CHECK(Device("cuda:3") == Device::cuda(3));
  CHECK(Device("cuda").index == 0);
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK_THROWS_WITH(Device("gpu"), Catch::Contains("invalid device string 'gpu'"));
  CHECK_THROWS_AS(Device("cuda:x"), Error);
  CHECK_THROWS_AS(Device("cuda:-1"), Error);
  if (!cuda_built()) {
    CHECK(Device::best() == Device::cpu());
    Tensor t = ones({2});
    CHECK_THROWS_WITH(t.to(Device::cuda(0)), Catch::Contains("no CUDA backend"));
  }
}

TEST_CASE("shape: broadcasting, dims and strides", "[core]") {
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}, "t") == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {5}, "t") == Shape{5});
  CHECK(broadcast_shapes({0, 1}, {1, 3}, "t") == Shape{0, 3});
  CHECK_THROWS_WITH(broadcast_shapes({2, 3}, {4}, "add"), Catch::Contains("add: shapes (2, 3) and (4,)"));
  CHECK(contiguous_strides({2, 3, 4}) == Strides{12, 4, 1});
  CHECK(normalize_dim(-1, 3, "t") == 2);
  CHECK_THROWS_WITH(normalize_dim(3, 3, "sum"), Catch::Contains("sum: dim 3 is out of range"));
  CHECK_THROWS_AS(Shape({1, 2, 3, 4, 5, 6, 7, 8, 9}), Error);
  CHECK(shape_str(Shape{}) == "()");
  CHECK(shape_str(Shape{7}) == "(7,)");
}

TEST_CASE("cpu allocator: 64-byte alignment and statistics", "[core]") {
  CpuAllocator alloc;
  void* a = alloc.allocate(100);
  void* b = alloc.allocate(1000);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);
  CHECK(alloc.stats().bytes_in_use == 1100);
  CHECK(alloc.stats().allocation_count == 2);
  alloc.deallocate(b, 1000);
  CHECK(alloc.stats().bytes_in_use == 100);
  CHECK(alloc.stats().peak_bytes_in_use == 1100);
  alloc.reset_peak();
  CHECK(alloc.stats().peak_bytes_in_use == 100);
  alloc.deallocate(a, 100);
  CHECK(alloc.stats().bytes_in_use == 0);
  CHECK(alloc.stats().free_count == 2);
  CHECK(alloc.allocate(0) == nullptr);
  // Tensors go through the process allocator and give their bytes back when they die.
  const int64_t before = cpu_allocator().stats().bytes_in_use;
  {
    Tensor t = empty({1000}, {.dtype = DType::f64});
    CHECK(cpu_allocator().stats().bytes_in_use >= before + 8000);
    CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  }
  CHECK(cpu_allocator().stats().bytes_in_use == before);
}

TEST_CASE("philox4x32-10: Random123 known-answer vectors", "[core][random]") {
  Philox4 r = philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  r = philox4x32_10(Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  CHECK(r.v[0] == 0x408f276du);
  CHECK(r.v[1] == 0x41c83b0eu);
  CHECK(r.v[2] == 0xa20bc7c6u);
  CHECK(r.v[3] == 0x6d5451fdu);
  r = philox4x32_10(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  CHECK(r.v[0] == 0xd16cfe09u);
  CHECK(r.v[1] == 0x94fdccebu);
  CHECK(r.v[2] == 0x5001e420u);
  CHECK(r.v[3] == 0x24126ea1u);
}

TEST_CASE("random: seeded, reproducible, layout as documented", "[core][random]") {
  Generator g1(42), g2(42);
  Tensor a = rand({1000}, {}, g1), b = rand({1000}, {}, g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(g1.offset() == 250);  // four floats per Philox block
  // Element 5 is word 1 of block 1 (offset 0 + 5 / 4).
  const Philox4 r = philox4x32_10(uint64_t{1}, uint64_t{42});
  CHECK(a.to_vector<float>()[5] == philox_uniform_f32(r.v[1]));
  // A second draw continues the stream instead of repeating it.
  Tensor c = rand({1000}, {}, g1);
  CHECK(c.to_vector<float>() != a.to_vector<float>());
  // Moments: U[0,1) mean 1/2 var 1/12; N(0,1) mean 0 var 1 (100k samples: 5 sigma bounds).
  Generator g(7);
  Tensor u = rand({100000}, {.dtype = DType::f64}, g);
  CHECK(u.mean().item() == Approx(0.5).margin(5 * std::sqrt(1.0 / 12 / 100000)));
  Tensor n = randn({100000}, {}, g);
  std::vector<float> nv = n.to_vector<float>();
  double s = 0, s2 = 0;
  for (float v : nv) s += v, s2 += double(v) * v;
  CHECK(s / nv.size() == Approx(0).margin(5 / std::sqrt(100000.0)));
  CHECK(s2 / nv.size() == Approx(1).margin(0.02));
  Tensor k = randint(3, 7, {10000}, {.dtype = DType::i64}, g);
  std::vector<int64_t> kv = k.to_vector<int64_t>();
  int counts[4] = {};
  for (int64_t v : kv) {
    REQUIRE(v >= 3);
    REQUIRE(v < 7);
    counts[v - 3]++;
  }
  for (int cnt : counts) CHECK(cnt == Approx(2500).margin(200));
  Tensor m = bernoulli({10000}, 0.3, {}, g);
  CHECK(m.mean().item() == Approx(0.3).margin(0.03));
  manual_seed(5);
  Tensor d1 = randn({4});
  manual_seed(5);
  CHECK(randn({4}).to_vector<float>() == d1.to_vector<float>());
  CHECK_THROWS_AS(randint(5, 5, {2}), Error);
  CHECK_THROWS_AS(bernoulli({2}, 1.5), Error);
}

TEST_CASE("errors: ember::Error carries the op and the shapes", "[core]") {
  Tensor a = ones({2, 3}), b = ones({4});
  CHECK_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("(2, 3)") && Catch::Contains("(4,)"));
  Tensor i = ones({2}, {.dtype = DType::i64});
  CHECK_THROWS_WITH(exp(i), Catch::Contains("exp") && Catch::Contains("int64"));
  CHECK_THROWS_WITH(a.sum({2}), Catch::Contains("sum: dim 2 is out of range"));
  Tensor undefined;
  CHECK_THROWS_WITH(undefined.numel(), Catch::Contains("undefined tensor"));
}

TEST_CASE("cpu allocator: large blocks are cached and reused, empty_cache releases them", "[core]") {
  CpuAllocator alloc;
  void* a = alloc.allocate(1 << 20);
  alloc.deallocate(a, 1 << 20);
  CHECK(alloc.cached_bytes() == (1 << 20));
  CHECK(alloc.stats().bytes_in_use == 0);
  void* b = alloc.allocate((1 << 20) - 100);  // rounds to the same size: the same block
  CHECK(b == a);
  CHECK(alloc.cached_bytes() == 0);
  CHECK(alloc.stats().bytes_in_use == (1 << 20) - 100);
  void* small = alloc.allocate(100);  // small blocks are not cached
  alloc.deallocate(small, 100);
  CHECK(alloc.cached_bytes() == 0);
  alloc.deallocate(b, (1 << 20) - 100);
  CHECK(alloc.cached_bytes() == (1 << 20));
  alloc.empty_cache();
  CHECK(alloc.cached_bytes() == 0);
}
