// kernels/cuda/optim: Adam/AdamW and SGD steps (single and multi-tensor) bit-identical to the CPU
// step — the same kernels/optim.h functor, compiled without FMA contraction — and the gradient
// norm within double rounding of the CPU's.

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../ember.h"
#include "../../kernels/cpu/optim.h"
#include "../../kernels/cuda/optim.h"
#include "device_buffer.h"
#include "random_data.h"

namespace {

using ember::DType;
using ember::kernels::AdamHyper;
using ember::kernels::SgdHyper;
using ember::kernels::WeightDecayMode;
using ember::testing::DeviceBuffer;
using ember::testing::random_vector;

// Bit-for-bit equality, except that any NaN matches any NaN (a GPU returns its canonical NaN,
// x86 propagates the payload of an input NaN).
template <typename T>
void require_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i]);
      REQUIRE(false);
    }
  }
}

// One tensor's optimizer state, on the host and on the device.
template <typename T>
struct State {
  std::vector<T> p, g, m, v, vmax;
  DeviceBuffer<T> dp, dg, dm, dv, dvmax;
  explicit State(size_t n, uint64_t seed)
      : p(random_vector<T>(n, seed)),
        g(random_vector<T>(n, seed + 1)),
        m(random_vector<T>(n, seed + 2, -0.1, 0.1)),
        v(random_vector<T>(n, seed + 3, 0.0, 0.01)),
        vmax(random_vector<T>(n, seed + 4, 0.0, 0.01)),
        dp(p), dg(g), dm(m), dv(v), dvmax(vmax) {
    if (n > 3) {  // non-finite gradients propagate the same way on both sides
      g[1] = std::numeric_limits<T>::quiet_NaN();
      g[2] = std::numeric_limits<T>::infinity();
      dg.upload(g);
    }
  }
  void require_same(const std::string& what, bool with_vmax = true) {
    require_bits(dp.download(), p, what + " param");
    require_bits(dm.download(), m, what + " exp_avg / momentum");
    require_bits(dv.download(), v, what + " exp_avg_sq");
    if (with_vmax) require_bits(dvmax.download(), vmax, what + " max_exp_avg_sq");
    for (auto* b : {&dp, &dm, &dv, &dvmax}) b->check_guards();
  }
};

std::vector<AdamHyper> adam_configs() {
  std::vector<AdamHyper> v;
  for (WeightDecayMode d : {WeightDecayMode::None, WeightDecayMode::L2, WeightDecayMode::Decoupled})
    for (bool ams : {false, true})
      for (bool maximize : {false, true}) {
        AdamHyper h;
        h.lr = 3e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.step = 7;
        h.decay = d, h.weight_decay = d == WeightDecayMode::None ? 0.0 : 0.01, h.amsgrad = ams, h.maximize = maximize;
        v.push_back(h);
      }
  AdamHyper odd;  // beta1 >= 0.5 flips the lerp branch
  odd.beta1 = 0.3, odd.step = 1;
  v.push_back(odd);
  return v;
}

std::vector<SgdHyper> sgd_configs() {
  std::vector<SgdHyper> v;
  v.push_back({0.1, 0, 0, 0, false, false});
  v.push_back({0.1, 0.9, 0, 0, false, false});
  v.push_back({0.05, 0.9, 0.1, 1e-4, false, false});
  v.push_back({0.05, 0.9, 0, 1e-4, true, false});
  v.push_back({0.01, 0.5, 0, 0, true, true});
  return v;
}

const size_t kSizes[] = {1, 31, 33, 1000, 4097, 9001};

}  // namespace

TEMPLATE_TEST_CASE("cuda adam_step is bit-identical to the CPU step", "[cuda][optim]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  uint64_t seed = 1;
  for (const AdamHyper& h : adam_configs()) {
    for (size_t n : kSizes) {
      INFO("n=" << n << " decay=" << int(h.decay) << " amsgrad=" << h.amsgrad << " maximize=" << h.maximize);
      State<T> s(n, seed += 10);
      for (int step = 0; step < 2; ++step) {  // twice: the second step reads the first's state
        ember::kernels::gpu::adam_step(dt, static_cast<int64_t>(n), s.dp.data(), s.dg.data(), s.dm.data(),
                                        s.dv.data(), h.amsgrad ? s.dvmax.data() : nullptr, h);
        ember::kernels::cpu::adam_step(dt, static_cast<int64_t>(n), s.p.data(), s.g.data(), s.m.data(), s.v.data(),
                                       h.amsgrad ? s.vmax.data() : nullptr, h);
      }
      s.require_same("adam");
    }
  }
}

TEMPLATE_TEST_CASE("cuda sgd_step is bit-identical to the CPU step", "[cuda][optim]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  uint64_t seed = 500;
  for (const SgdHyper& h : sgd_configs()) {
    for (size_t n : kSizes) {
      INFO("n=" << n << " momentum=" << h.momentum << " nesterov=" << h.nesterov << " wd=" << h.weight_decay);
      State<T> s(n, seed += 10);
      for (int step = 0; step < 2; ++step) {  // step 0 initialises the buffer, step 1 reads it
        const bool first = step == 0;
        ember::kernels::gpu::sgd_step(dt, static_cast<int64_t>(n), s.dp.data(), s.dg.data(),
                                       h.momentum != 0 ? s.dm.data() : nullptr, first, h);
        ember::kernels::cpu::sgd_step(dt, static_cast<int64_t>(n), s.p.data(), s.g.data(),
                                      h.momentum != 0 ? s.m.data() : nullptr, first, h);
      }
      s.require_same("sgd", false);
    }
  }
}

TEMPLATE_TEST_CASE("cuda adam_step_multi / sgd_step_multi equal per-tensor CPU steps in one launch", "[cuda][optim]",
                   float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  const size_t sizes[] = {1, 4097, 0, 300, 8192, 5};  // chunk boundaries, an empty tensor
  std::vector<std::unique_ptr<State<T>>> states;
  for (size_t i = 0; i < std::size(sizes); ++i) states.push_back(std::make_unique<State<T>>(sizes[i], 900 + 10 * i));

  for (const AdamHyper& h : adam_configs()) {
    std::vector<ember::kernels::gpu::AdamTensor> list;
    for (auto& s : states)
      list.push_back({s->dp.data(), s->dg.data(), s->dm.data(), s->dv.data(), h.amsgrad ? s->dvmax.data() : nullptr,
                      static_cast<int64_t>(s->p.size())});
    ember::kernels::gpu::adam_step_multi(dt, list.data(), static_cast<int64_t>(list.size()), h);
    for (auto& s : states)
      if (!s->p.empty())  // (an empty vector's data() is null, which the CPU's amsgrad check rejects)
        ember::kernels::cpu::adam_step(dt, static_cast<int64_t>(s->p.size()), s->p.data(), s->g.data(), s->m.data(),
                                     s->v.data(), h.amsgrad ? s->vmax.data() : nullptr, h);
  }
  for (size_t i = 0; i < states.size(); ++i) states[i]->require_same("adam_multi tensor " + std::to_string(i));

  for (const SgdHyper& h : sgd_configs()) {
    for (bool first : {true, false}) {
      std::vector<ember::kernels::gpu::SgdTensor> list;
      for (auto& s : states)
        list.push_back({s->dp.data(), s->dg.data(), s->dm.data(), static_cast<int64_t>(s->p.size())});
      ember::kernels::gpu::sgd_step_multi(dt, list.data(), static_cast<int64_t>(list.size()), first, h);
      for (auto& s : states)
        if (!s->p.empty())
          ember::kernels::cpu::sgd_step(dt, static_cast<int64_t>(s->p.size()), s->p.data(), s->g.data(), s->m.data(),
                                      first, h);
    }
  }
  for (size_t i = 0; i < states.size(); ++i) states[i]->require_same("sgd_multi tensor " + std::to_string(i));

  // An empty list is a no-op; a missing buffer is an ember::Error.
  ember::kernels::gpu::adam_step_multi(dt, nullptr, 0, AdamHyper{});
  AdamHyper ams;
  ams.amsgrad = true;
  ember::kernels::gpu::AdamTensor bad{states[0]->dp.data(), states[0]->dg.data(), states[0]->dm.data(),
                                       states[0]->dv.data(), nullptr, 1};
  REQUIRE_THROWS_AS(ember::kernels::gpu::adam_step_multi(dt, &bad, 1, ams), ember::Error);
}

TEMPLATE_TEST_CASE("cuda grad_norm matches the CPU within double rounding, left in device memory", "[cuda][optim]",
                   float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  const double inf = std::numeric_limits<double>::infinity();
  DeviceBuffer<double> out(std::vector<double>{-1.0});
  const auto gpu_norm = [&](const DeviceBuffer<T>& dg, size_t n, double p) {
    ember::kernels::gpu::grad_norm(dt, static_cast<int64_t>(n), dg.data(), p, out.data());
    return out.download()[0];
  };
  for (size_t n : {size_t{1}, size_t{31}, size_t{1000}, size_t{70001}}) {
    const std::vector<T> g = random_vector<T>(n, 77 + n, -3.0, 3.0);
    DeviceBuffer<T> dg(g);
    for (double p : {2.0, 1.0, 3.0, inf}) {
      INFO("n=" << n << " p=" << p);
      const double got = gpu_norm(dg, n, p);
      double want = -1;
      ember::kernels::cpu::grad_norm(dt, static_cast<int64_t>(n), g.data(), p, &want);
      // The max is exact. The sums: the CPU adds in double, the CUDA kernels in acc_t<T> (Note
      // [Accumulation types] in core/dtype.h). f64: n non-negative doubles in different orders,
      // relative difference <= n * 2^-53, and pow may differ by an ulp per term. f32: a float
      // sum of non-negative terms through two block reductions (at most a few terms per thread,
      // log2(256) tree levels each) is within (4 + 2 log2 n) ulp relative, pow adding one; the
      // root shrinks the relative difference, the rounding to T adds an ulp of T.
      const double f32_ulps = 5.0 + 2.0 * std::log2(static_cast<double>(n) + 1.0);
      const double rtol = std::is_same_v<T, float> ? f32_ulps * std::numeric_limits<float>::epsilon() : 1e-11;
      if (std::isinf(p)) {
        REQUIRE(got == want);
      } else {
        REQUIRE(std::fabs(got - want) <= rtol * want);
      }
      // The value is already rounded to T: a 0-dim tensor of the gradients' dtype.
      REQUIRE(static_cast<double>(static_cast<T>(got)) == got);
    }
  }
  // NaN anywhere: the inf-norm is NaN, and so are the sums.
  std::vector<T> g = random_vector<T>(5000, 3);
  g[4321] = std::numeric_limits<T>::quiet_NaN();
  DeviceBuffer<T> dg(g);
  REQUIRE(std::isnan(gpu_norm(dg, 5000, inf)));
  REQUIRE(std::isnan(gpu_norm(dg, 5000, 2.0)));
  // An inf (no NaN): inf.
  g[4321] = -std::numeric_limits<T>::infinity();
  dg.upload(g);
  REQUIRE(gpu_norm(dg, 5000, inf) == inf);
  // Empty: 0, written all the same.
  REQUIRE(gpu_norm(dg, 0, 2.0) == 0.0);
}

TEST_CASE("cuda clip_coefficient and scale_grads equal the CPU bit for bit", "[cuda][optim]") {
  using ember::kernels::UnscaleTensor;
  const double inf = std::numeric_limits<double>::infinity();
  // Per-gradient norms (float32 values, or float64 ones), with the coefficient below 1, at 1, and NaN.
  const std::vector<std::vector<double>> lists = {{3.0, 4.0, 12.0}, {0.25, 0.5}, {1.5, std::nan("")}, {}};
  for (const std::vector<double>& norms : lists)
    for (DType dtype : {DType::f32, DType::f64})
      for (double p : {2.0, 1.0, 3.0, inf})
        for (double max_norm : {1.0, 6.5, 100.0}) {
          INFO("norms " << norms.size() << " dtype " << ember::dtype_name(dtype) << " p " << p << " max " << max_norm);
          std::vector<double> want(2, -1.0);
          ember::kernels::cpu::clip_coefficient(norms.data(), static_cast<int64_t>(norms.size()), p, dtype, max_norm,
                                                want.data());
          DeviceBuffer<double> dnorms(norms.empty() ? std::vector<double>{0.0} : norms);
          DeviceBuffer<double> got(std::vector<double>{-1.0, -1.0});
          ember::kernels::gpu::clip_coefficient(dnorms.data(), static_cast<int64_t>(norms.size()), p, dtype, max_norm,
                                                got.data());
          require_bits(got.download(), want, "total and coefficient");
          REQUIRE((std::isnan(want[1]) || want[1] <= 1.0));
        }
  // The float32 arithmetic of torch: (1 / (total + 1e-6)) * max_norm in float32.
  std::vector<double> tc(2);
  const std::vector<double> n345 = {3.0, 4.0};
  ember::kernels::cpu::clip_coefficient(n345.data(), 2, 2.0, DType::f32, 1.0, tc.data());
  REQUIRE(tc[0] == 5.0);
  REQUIRE(tc[1] == static_cast<double>((1.0f / (5.0f + static_cast<float>(1e-6))) * 1.0f));

  // scale_grads over a ragged list in one call; nothing changes when the coefficient is 1.
  for (double coef : {0.375, 1.0 / 3.0, 1.0}) {
    std::vector<std::vector<float>> host;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dev;
    std::vector<UnscaleTensor> cpu_list, gpu_list;
    for (size_t n : {size_t{1}, size_t{4097}, size_t{0}, size_t{9001}}) {
      host.push_back(random_vector<float>(n, 40 + n));
      if (n > 2) host.back()[1] = std::numeric_limits<float>::infinity();
      dev.push_back(std::make_unique<DeviceBuffer<float>>(host.back()));
    }
    for (size_t i = 0; i < host.size(); ++i) {
      cpu_list.push_back({host[i].data(), static_cast<int64_t>(host[i].size())});
      gpu_list.push_back({dev[i]->data(), static_cast<int64_t>(host[i].size())});
    }
    const std::vector<std::vector<float>> before = host;
    ember::kernels::cpu::scale_grads(DType::f32, cpu_list.data(), static_cast<int64_t>(cpu_list.size()), &coef);
    DeviceBuffer<double> dcoef(std::vector<double>{coef});
    ember::kernels::gpu::scale_grads(DType::f32, gpu_list.data(), static_cast<int64_t>(gpu_list.size()), dcoef.data());
    for (size_t i = 0; i < host.size(); ++i) {
      require_bits(dev[i]->download(), host[i], "scaled gradient");
      for (size_t k = 0; k < host[i].size(); ++k)
        REQUIRE(host[i][k] == before[i][k] * static_cast<float>(coef));  // the product in float32
      dev[i]->check_guards();
    }
  }
}

TEMPLATE_TEST_CASE("cuda adam_coeffs_on_device equals the host's coefficients, less the skipped steps",
                   "[cuda][optim][amp]", float, double) {
  using T = TestType;
  const DType dt = ember::dtype_of<T>::value;
  for (AdamHyper h : adam_configs()) {
    h.step = 12;
    for (double skipped : {0.0, 1.0, 11.0}) {
      INFO("decay " << static_cast<int>(h.decay) << " amsgrad " << h.amsgrad << " skipped " << skipped);
      // Device buffers of the sizes the optimizer uses: the hyperparameters as uploaded before a
      // replay, the count of skipped steps, and the coefficients the step kernels read.
      DeviceBuffer<unsigned char> hyper(std::vector<unsigned char>(sizeof(AdamHyper)));
      DeviceBuffer<double> count(std::vector<double>{skipped});
      DeviceBuffer<unsigned char> coeffs(std::vector<unsigned char>(ember::kernels::gpu::adam_coeffs_bytes(dt)));
      ember::kernels::gpu::upload_adam_hyper(h, hyper.data());
      ember::kernels::gpu::adam_coeffs_on_device(dt, hyper.data(), count.data(), coeffs.data());
      AdamHyper effective = h;
      effective.step = h.step - static_cast<int64_t>(skipped);
      const ember::kernels::AdamCoeffs<T> want = ember::kernels::make_adam_coeffs<T>(effective);
      const std::vector<unsigned char> got = coeffs.download();
      REQUIRE(got.size() == sizeof want);
      // Field by field: the struct's padding bytes are not compared.
      ember::kernels::AdamCoeffs<T> c;
      std::memcpy(&c, got.data(), sizeof c);
      const std::vector<T> got_values{c.grad_sign,     c.decay_factor,    c.weight_decay,
                                      c.lerp_weight,   c.lerp_coeff,      c.beta2,
                                      c.one_minus_beta2, c.bias_correction2_sqrt, c.eps, c.neg_step_size};
      const std::vector<T> want_values{want.grad_sign,     want.decay_factor,    want.weight_decay,
                                       want.lerp_weight,   want.lerp_coeff,      want.beta2,
                                       want.one_minus_beta2, want.bias_correction2_sqrt, want.eps, want.neg_step_size};
      if (ember::testing::kExactNanBits) {
        require_bits(got_values, want_values, "coefficients");  // the emulator: the host's pow
      } else {
        // A GPU's double pow may differ in the last place (Note [Steps cancelled on the device]
        // in optim/optimizer.h): at most one unit of T in the rounded coefficient.
        for (size_t k = 0; k < want_values.size(); ++k)
          REQUIRE(std::abs(got_values[k] - want_values[k]) <=
                  std::numeric_limits<T>::epsilon() * std::abs(want_values[k]));
      }
      REQUIRE(c.lerp_from_start == want.lerp_from_start);
      REQUIRE(c.skip == want.skip);
    }
  }
}

TEST_CASE("cuda optimizer steps: n == 0 and missing state are handled like the CPU", "[cuda][optim]") {
  DeviceBuffer<float> p(1), g(1), m(1), v(1);
  AdamHyper h;
  ember::kernels::gpu::adam_step(DType::f32, 0, p.data(), g.data(), m.data(), v.data(), nullptr, h);
  h.amsgrad = true;
  REQUIRE_THROWS_AS(ember::kernels::gpu::adam_step(DType::f32, 1, p.data(), g.data(), m.data(), v.data(), nullptr, h),
                    ember::Error);
  SgdHyper s;
  s.momentum = 0.9;
  REQUIRE_THROWS_AS(ember::kernels::gpu::sgd_step(DType::f32, 1, p.data(), g.data(), nullptr, true, s), ember::Error);
  REQUIRE_THROWS_AS(ember::kernels::gpu::adam_step(DType::i64, 1, p.data(), g.data(), m.data(), v.data(), m.data(),
                                                    AdamHyper{}),
                    ember::Error);
  p.check_guards();
}

// ---- loss scaling (optim/grad_scaler.h) -------------------------------------------------------

TEMPLATE_TEST_CASE("cuda non_finite_check_and_unscale equals the CPU over a ragged list in one launch",
                   "[cuda][optim][amp]", float, double) {
  using T = TestType;
  // Sizes around the 4096-element chunk, an empty tensor, and a planted inf / NaN only in some
  // lists: the flag must be raised by any chunk of any tensor and never cleared.
  const std::vector<size_t> sizes = {1, 4095, 0, 4097, 12289, 33};
  for (const int plant : {-1, 0, 3, 5}) {  // -1: all finite; else the tensor that gets a bad value
    INFO("planted in tensor " << plant);
    std::vector<std::vector<T>> host;
    std::vector<std::unique_ptr<DeviceBuffer<T>>> dev;
    std::vector<ember::kernels::UnscaleTensor> cpu_list, gpu_list;
    for (size_t i = 0; i < sizes.size(); ++i) {
      host.push_back(random_vector<T>(sizes[i], 100 + i, -1e4, 1e4));
      if (static_cast<int>(i) == plant) host.back()[sizes[i] - 1] = i % 2 ? std::numeric_limits<T>::quiet_NaN()
                                                                               : -std::numeric_limits<T>::infinity();
      dev.push_back(std::make_unique<DeviceBuffer<T>>(host.back()));
      gpu_list.push_back({dev.back()->data(), static_cast<int64_t>(sizes[i])});
    }
    for (auto& h : host) cpu_list.push_back({h.data(), static_cast<int64_t>(h.size())});
    const float inv_scale = 1.0f / 65536.0f;
    float cpu_found = 0;
    ember::kernels::cpu::non_finite_check_and_unscale(ember::dtype_of<T>::value, cpu_list.data(), int64_t(cpu_list.size()),
                                                      &cpu_found, &inv_scale);
    DeviceBuffer<float> found(std::vector<float>{0.0f}), inv(std::vector<float>{inv_scale});
    ember::kernels::gpu::non_finite_check_and_unscale(ember::dtype_of<T>::value, gpu_list.data(), int64_t(gpu_list.size()),
                                                      found.data(), inv.data());
    REQUIRE(cpu_found == (plant >= 0 ? 1.0f : 0.0f));
    REQUIRE(found.download()[0] == cpu_found);
    for (size_t i = 0; i < sizes.size(); ++i) {
      require_bits(dev[i]->download(), host[i], "tensor " + std::to_string(i));
      dev[i]->check_guards();
    }
    // The flag is only ever raised: a clean list leaves a raised flag raised.
    std::vector<T> clean = {1, 2};
    DeviceBuffer<T> dclean(clean);
    const ember::kernels::UnscaleTensor one{dclean.data(), 2};
    DeviceBuffer<float> raised(std::vector<float>{1.0f});
    ember::kernels::gpu::non_finite_check_and_unscale(ember::dtype_of<T>::value, &one, 1, raised.data(), inv.data());
    REQUIRE(raised.download()[0] == 1.0f);
  }
}

TEST_CASE("cuda update_scale follows the CPU through backoff, growth and the inf guard", "[cuda][optim][amp]") {
  float cpu_scale = 3.0e38f;
  int32_t cpu_tracker = 0;
  DeviceBuffer<float> scale(std::vector<float>{cpu_scale}), flag(1);
  DeviceBuffer<int32_t> tracker(std::vector<int32_t>{0});
  for (const float found : {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f}) {
    flag.upload({found});
    ember::kernels::cpu::update_scale(&cpu_scale, &cpu_tracker, &found, 2.0, 0.5, 2);
    ember::kernels::gpu::update_scale(scale.data(), tracker.data(), flag.data(), 2.0, 0.5, 2);
    REQUIRE(scale.download()[0] == cpu_scale);
    REQUIRE(tracker.download()[0] == cpu_tracker);
  }
  // Growth every 2 clean steps: twice refused (3e38 * 2 is inf), once from 1.5e38 back to 3e38;
  // two backoffs to 1.5e38.
  REQUIRE(cpu_scale == 1.5e38f);
}

// The scales must match exactly (the skipped step and every growth/backoff); the parameters to a few
// f32 ulps, because the device sums the loss and the gradients in float (Note [Accumulation types] in
// core/dtype.h) and the CPU in double. A step taken where the CPU skipped it would move a parameter
// by about lr = 0.05.
TEST_CASE("cuda GradScaler trains like the CPU, with the same skipped step and scales", "[cuda][optim][amp]") {
  using namespace ember;
  const auto train = [](Device device) {
    manual_seed(11);
    nn::Linear model(5, 4);
    model.to(device);
    optim::AdamW opt(model.parameters(), {.lr = 0.05});
    optim::GradScaler scaler({.init_scale = 256.0, .growth_interval = 2});
    const Tensor x = randn({6, 5}).to(device);
    const Tensor y = from_vector<int64_t>({0, 1, 2, 3, 0, 1}).to(device);
    std::vector<double> scales;
    for (int i = 0; i < 6; ++i) {
      opt.zero_grad();
      scaler.scale(cross_entropy(model.forward(x), y)).backward();
      if (i == 2) model.parameters()[0].grad().fill_(std::numeric_limits<double>::infinity());
      scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    std::vector<float> all;
    for (const Tensor& p : model.parameters()) {
      const Tensor c = p.to(Device::cpu()).contiguous();
      all.insert(all.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return std::make_pair(all, scales);
  };
  const auto [cpu_params, cpu_scales] = train(Device::cpu());
  const auto [gpu_params, gpu_scales] = train(Device::cuda(0));
  REQUIRE(cpu_scales == std::vector<double>{256, 512, 256, 256, 512, 512});
  REQUIRE(gpu_scales == cpu_scales);
  REQUIRE(gpu_params.size() == cpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO("parameter element " << i << ": cpu " << cpu_params[i] << ", cuda " << gpu_params[i]);
    REQUIRE(std::abs(gpu_params[i] - cpu_params[i]) <= 1e-5f * std::max(1.0f, std::abs(cpu_params[i])));
  }
}
