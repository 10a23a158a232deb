// kernels/cuda/elementwise in f16 and bf16 through each of its contiguous paths (Note [16-bit
// pairs] in kernels/cuda/elementwise.cu). The device buffers are 256-byte aligned, so a view 0
// elements in takes the 4-element packs, 2 elements in the __half2 / __nv_bfloat162 pairs, and 1
// or 3 elements in the scalar kernel. The hot elementwise ops of a 16-bit training step — ReLU
// forward and backward, add, mul, a + alpha * b, casts to and from f32 and between the 16-bit
// types — on every 16-bit bit pattern (NaNs, infinities, subnormals, both zeros) at odd and tiny
// sizes: every path gives the scalar kernel's bits, and those are the CPU kernel's (but for which
// NaN comes out of two NaN inputs: require_same_bits_or_nan).

#include <ember/kernels/cpu/elementwise.h>
#include <ember/kernels/cuda/elementwise.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "kernel_check.h"

using namespace ember;
using namespace ember::kernels;
using namespace ember::testing;

namespace {

// The 65536 bit patterns of a 16-bit type, in a seeded random order (so that each small prefix
// mixes kinds of values and neighbours differ).
template <typename H>
std::vector<H> patterns(uint64_t seed) {
  std::vector<uint16_t> b(65536);
  for (uint32_t i = 0; i < 65536; ++i) b[i] = static_cast<uint16_t>(i);
  std::shuffle(b.begin(), b.end(), std::mt19937_64(seed));
  std::vector<H> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) std::memcpy(&v[i], &b[i], 2);
  return v;
}

// Random f32 bit patterns: every exponent, NaN payloads, ties of the 16-bit rounding.
std::vector<float> float_patterns(size_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<float> v(n);
  for (auto& x : v) {
    const uint32_t bits = rng();
    std::memcpy(&x, &bits, 4);
  }
  return v;
}

template <typename T>
std::vector<T> prefix(const std::vector<T>& v, int64_t n) {
  return std::vector<T>(v.begin(), v.begin() + n);
}

// The op over views `off` elements into the device buffers of its K inputs (of type I) and its
// output (of type O); `run(shape, out, ins)` launches it. Returns the n outputs.
template <typename O, typename I, size_t K, typename Run>
std::vector<O> gpu_at(int64_t off, const std::array<std::vector<I>, K>& ins, Run run) {
  const auto n = static_cast<int64_t>(ins[0].size());
  const IterShape s = iter_shape({n});
  std::vector<std::unique_ptr<DeviceBuffer<I>>> bufs;
  std::array<Operand, K> ops;
  for (size_t k = 0; k < K; ++k) {
    std::vector<I> host(static_cast<size_t>(n + off));
    std::copy(ins[k].begin(), ins[k].end(), host.begin() + off);
    bufs.push_back(std::make_unique<DeviceBuffer<I>>(host));
    ops[k] = contiguous(bufs.back()->data() + off, s);
  }
  DeviceBuffer<O> out(static_cast<size_t>(n + off));
  run(s, contiguous(out.data() + off, s), ops);
  out.check_guards();
  std::vector<O> got = out.download();
  got.erase(got.begin(), got.begin() + off);
  return got;
}

// The same op on the CPU (kernels/cpu), for the same run signature with host pointers.
template <typename O, typename I, size_t K, typename Run>
std::vector<O> cpu_of(const std::array<std::vector<I>, K>& ins, Run run) {
  const IterShape s = iter_shape({static_cast<int64_t>(ins[0].size())});
  std::array<Operand, K> ops;
  for (size_t k = 0; k < K; ++k) ops[k] = contiguous(const_cast<I*>(ins[k].data()), s);
  std::vector<O> out(ins[0].size());
  run(s, contiguous(out.data(), s), ops);
  return out;
}

// Equal bits, except that a NaN matches any NaN: which NaN a + b gives when a and b are both NaN
// is the host compiler's choice of operand order (x86 returns the first operand's NaN), on the
// CPU and in the emulator's vectorized loops alike. (A GPU gives its canonical NaN either way.)
template <typename T>
void require_same_bits_or_nan(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (std::isnan(g) && std::isnan(w)) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      FAIL(what << ": bits differ at " << i << ": got " << g << ", want " << w);
  }
}

// One op at sizes 65535, 7, 2 and 1 through every path: offsets 0 (packs of 4), 2 (pairs) and 3
// bit for bit the scalar kernel's (offset 1), and that the CPU's (NaN for NaN). Ops of two inputs
// (nan_of_two) match NaN for NaN between paths too.
template <typename O, typename I, size_t K, typename Gpu, typename Cpu>
void check_paths(const char* what, const std::array<std::vector<I>, K>& all, Gpu gpu_run, Cpu cpu_run,
                 bool nan_of_two = false) {
  for (const int64_t n : {int64_t{65535}, int64_t{7}, int64_t{2}, int64_t{1}}) {
    std::array<std::vector<I>, K> ins;
    for (size_t k = 0; k < K; ++k) ins[k] = prefix(all[k], n);
    INFO(what << ", n " << n);
    const std::vector<O> scalar = gpu_at<O>(1, ins, gpu_run);
    require_same_bits_or_nan(scalar, cpu_of<O>(ins, cpu_run), "scalar kernel against the CPU");
    for (const int64_t off : {0, 2, 3}) {
      INFO("view " << off << " elements in");
      if (nan_of_two)
        require_same_bits_or_nan(gpu_at<O>(off, ins, gpu_run), scalar, "against the scalar kernel");
      else
        require_same_bits(gpu_at<O>(off, ins, gpu_run), scalar, "against the scalar kernel");
    }
  }
}

template <typename H>
void check_16bit_ops() {
  const DType dt = dtype_of<H>::value;
  const std::vector<H> a = patterns<H>(1), b = patterns<H>(2), c = patterns<H>(3);
  // ReLU forward; the backward reads g and y (x is passed, unused).
  check_paths<H>("relu", std::array{a},
                 [&](const IterShape& s, Operand o, const std::array<Operand, 1>& in) {
                   gpu::unary(UnaryOp::Relu, dt, s, o, in[0], 0.0);
                 },
                 [&](const IterShape& s, Operand o, const std::array<Operand, 1>& in) {
                   cpu::unary(UnaryOp::Relu, dt, s, o, in[0], 0.0);
                 });
  check_paths<H>("relu backward", std::array{a, b, c},
                 [&](const IterShape& s, Operand o, const std::array<Operand, 3>& in) {
                   gpu::unary_backward(UnaryOp::Relu, dt, s, o, in[0], in[1], in[2], 0.0);
                 },
                 [&](const IterShape& s, Operand o, const std::array<Operand, 3>& in) {
                   cpu::unary_backward(UnaryOp::Relu, dt, s, o, in[0], in[1], in[2], 0.0);
                 });
  // add, mul, a + alpha b and a - alpha b (an optimizer's or a residual's axpy).
  const struct {
    BinaryOp op;
    double alpha;
    const char* name;
  } binaries[] = {{BinaryOp::Add, 1.0, "add"},
                  {BinaryOp::Mul, 1.0, "mul"},
                  {BinaryOp::Add, 0.3, "a + 0.3 b"},
                  {BinaryOp::Sub, 2.0, "a - 2 b"}};
  for (const auto& bin : binaries) {
    check_paths<H>(bin.name, std::array{a, b},
                   [&](const IterShape& s, Operand o, const std::array<Operand, 2>& in) {
                     gpu::binary(bin.op, dt, s, o, in[0], in[1], bin.alpha);
                   },
                   [&](const IterShape& s, Operand o, const std::array<Operand, 2>& in) {
                     cpu::binary(bin.op, dt, s, o, in[0], in[1], bin.alpha);
                   },
                   true);
  }
  // Casts: 16 -> f32, f32 -> 16 (8-byte float pairs with 4-byte 16-bit pairs), 16 -> the other 16.
  using Other = std::conditional_t<std::is_same_v<H, Half>, BFloat16, Half>;
  const DType other = dtype_of<Other>::value;
  auto cast = [](DType to, DType from) {
    return std::pair{[=](const IterShape& s, Operand o, const std::array<Operand, 1>& in) {
                       gpu::copy(s, to, o, from, in[0]);
                     },
                     [=](const IterShape& s, Operand o, const std::array<Operand, 1>& in) {
                       cpu::copy(s, to, o, from, in[0]);
                     }};
  };
  const auto [to_f32, to_f32_cpu] = cast(DType::f32, dt);
  check_paths<float>("cast to f32", std::array{a}, to_f32, to_f32_cpu);
  const auto [from_f32, from_f32_cpu] = cast(dt, DType::f32);
  check_paths<H>("cast from f32", std::array{float_patterns(65536, 4)}, from_f32, from_f32_cpu);
  const auto [to_other, to_other_cpu] = cast(other, dt);
  check_paths<Other>("cast to the other 16-bit type", std::array{a}, to_other, to_other_cpu);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda 16-bit elementwise: packs, __half2/__nv_bfloat162 pairs and the scalar kernel agree bit for "
                   "bit on every bit pattern",
                   "[cuda][elementwise][low_precision]", Half, BFloat16) {
  check_16bit_ops<TestType>();
}
