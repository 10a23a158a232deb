// optim::GradScaler (Note [Loss scaling] in optim/grad_scaler.h): torch.amp.GradScaler's rules
// checked on known values — a planted inf or NaN skips the step and halves the scale, growth
// after the interval (and never to inf), unscale_ before clipping, misuse refused, the state
// round trip, and ranks agreeing through a communicator. The CPU kernel against the CUDA one:
// tests/cuda/test_optim.cpp.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <ember/ember.h>
#include <ember/optim/optim.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>
#include <limits>

#include "parallel/rank_threads.h"

using namespace ember;

namespace {

using VF = std::vector<float>;

Tensor param(const VF& v) { return from_vector<float>(v, {.dtype = DType::f32, .requires_grad = true}); }
void set_grad(Tensor& p, const VF& g) { p.set_grad(from_vector<float>(g)); }
VF values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return VF(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
bool same_bits(const VF& a, const VF& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("GradScaler: scale multiplies the loss by 2^16, unscale_ divides the gradients exactly", "[amp]") {
  optim::GradScaler scaler;
  REQUIRE(scaler.get_scale() == 65536.0);
  Tensor p = param({1.0f, -2.0f, 3.0f});
  optim::SGD opt({p}, {.lr = 0.5});
  const Tensor loss = sum(mul(p, p));  // 1 + 4 + 9
  const Tensor scaled = scaler.scale(loss);
  REQUIRE(scaled.item() == 14.0 * 65536.0);
  scaled.backward();
  REQUIRE(same_bits(values(p.grad()), {2.0f * 65536, -4.0f * 65536, 6.0f * 65536}));
  scaler.unscale_(opt);
  REQUIRE(same_bits(values(p.grad()), {2.0f, -4.0f, 6.0f}));
  REQUIRE(scaler.step(opt));
  REQUIRE(same_bits(values(p), {0.0f, 0.0f, 0.0f}));  // p - 0.5 * 2p
  scaler.update();
  REQUIRE(scaler.get_scale() == 65536.0);
  REQUIRE(scaler.growth_tracker() == 1);
}

TEST_CASE("GradScaler: an inf or NaN gradient skips the step and halves the scale", "[amp]") {
  for (const float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    INFO("planted " << bad);
    Tensor a = param({1.0f, 2.0f}), b = param({3.0f, 4.0f, 5.0f});
    optim::Adam opt({a, b}, {.lr = 0.1});
    optim::GradScaler scaler({.init_scale = 1024.0});
    (void)scaler.scale(sum(a)).item();  // creates the scale on the CPU
    set_grad(a, {1.0f, 1.0f});
    set_grad(b, {1.0f, bad, 1.0f});  // the second tensor of the list: one kernel call sees both
    REQUIRE_FALSE(scaler.step(opt));
    REQUIRE(same_bits(values(a), {1.0f, 2.0f}));
    REQUIRE(same_bits(values(b), {3.0f, 4.0f, 5.0f}));
    REQUIRE(opt.state_dict().tensors.empty());  // Adam never ran: no exp_avg was created
    scaler.update();
    REQUIRE(scaler.get_scale() == 512.0);
    REQUIRE(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("GradScaler: growth after growth_interval clean steps, never to inf", "[amp]") {
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 8.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 3});
  const auto step = [&](float g) {
    (void)scaler.scale(sum(p));
    set_grad(p, {g});
    scaler.step(opt);
    scaler.update();
    return std::make_pair(scaler.get_scale(), scaler.growth_tracker());
  };
  REQUIRE(step(1) == std::make_pair(8.0, int64_t{1}));
  REQUIRE(step(1) == std::make_pair(8.0, int64_t{2}));
  REQUIRE(step(1) == std::make_pair(16.0, int64_t{0}));  // the third clean step in a row
  REQUIRE(step(1) == std::make_pair(16.0, int64_t{1}));
  REQUIRE(step(kInf) == std::make_pair(4.0, int64_t{0}));  // backoff 0.25 and the count restarts
  REQUIRE(step(1) == std::make_pair(4.0, int64_t{1}));

  // 2^127 * 2 overflows float32: the scale stays, the count restarts.
  optim::GradScaler big({.init_scale = std::ldexp(1.0, 127), .growth_interval = 1});
  (void)big.scale(sum(p));
  set_grad(p, {1.0f});
  big.step(opt);
  big.update();
  REQUIRE(big.get_scale() == std::ldexp(1.0, 127));
  REQUIRE(big.growth_tracker() == 0);
}

TEST_CASE("GradScaler: training with loss scaling equals training without, bit for bit", "[amp]") {
  // Scaling by a power of two and back is exact in float32 (no gradient here comes near the
  // float32 limits), so the two runs must agree to the last bit.
  const auto train = [](bool scaled) {
    manual_seed(7);
    nn::Linear model(6, 3);
    optim::Adam opt(model.parameters(), {.lr = 0.01});
    optim::GradScaler scaler({.enabled = scaled});
    const Tensor x = randn({8, 6});
    const Tensor y = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1});
    for (int i = 0; i < 5; ++i) {
      opt.zero_grad();
      scaler.scale(cross_entropy(model.forward(x), y)).backward();
      scaler.step(opt);
      scaler.update();
    }
    VF all;
    for (const Tensor& p : model.parameters()) {
      const VF v = values(p);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  REQUIRE(same_bits(train(true), train(false)));
}

TEST_CASE("GradScaler: unscale_ before clipping clips the true gradients", "[amp]") {
  Tensor p = param({3.0f, 4.0f});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScaler scaler;
  scaler.scale(sum(mul(p, p))).backward();  // gradient 2p = (6, 8), scaled by 2^16
  scaler.unscale_(opt);
  REQUIRE(optim::clip_grad_norm_({p}, 5.0) == Approx(10.0).epsilon(1e-6));  // the true norm
  REQUIRE(values(p.grad())[0] == Approx(3.0f).epsilon(1e-6));
  REQUIRE(scaler.step(opt));  // does not unscale a second time
  REQUIRE(values(p)[0] == Approx(0.0f).margin(1e-5));
  REQUIRE(values(p)[1] == Approx(0.0f).margin(1e-5));
  scaler.update();
}

TEST_CASE("GradScaler: misuse is refused with a message", "[amp]") {
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler;
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("no loss was scaled yet"));
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Contains("no loss was scaled yet"));
  scaler.scale(sum(p)).backward();
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Contains("no optimizer was unscaled or stepped"));
  scaler.unscale_(opt);
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("already called for this optimizer"));
  scaler.step(opt);
  REQUIRE_THROWS_WITH(scaler.step(opt), Catch::Contains("already called for this optimizer"));
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("called after step()"));
  scaler.update();
  REQUIRE_NOTHROW(scaler.unscale_(opt));  // a new iteration

  REQUIRE_THROWS_WITH(optim::GradScaler({.init_scale = 0}), Catch::Contains("init_scale must be a finite positive"));
  REQUIRE_THROWS_WITH(optim::GradScaler({.growth_factor = 1.0}), Catch::Contains("growth_factor must be"));
  REQUIRE_THROWS_WITH(optim::GradScaler({.backoff_factor = 1.0}), Catch::Contains("backoff_factor must be in (0, 1)"));
  REQUIRE_THROWS_WITH(optim::GradScaler({.growth_interval = 0}), Catch::Contains("growth_interval must be"));
}

TEST_CASE("GradScaler: disabled, every call passes through", "[amp]") {
  Tensor p = param({2.0f});
  optim::SGD opt({p}, {.lr = 0.5});
  optim::GradScaler scaler({.enabled = false});
  const Tensor loss = sum(mul(p, p));
  REQUIRE(scaler.scale(loss).item() == 4.0);
  scaler.scale(loss).backward();
  REQUIRE(scaler.step(opt));
  scaler.update();
  REQUIRE(values(p)[0] == 0.0f);
  REQUIRE(scaler.get_scale() == 1.0);
  REQUIRE(scaler.state_dict().empty());
}

TEST_CASE("GradScaler: state_dict round trip continues bit for bit", "[amp]") {
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler a({.growth_interval = 4});
  const auto step = [&](optim::GradScaler& s, float g) {
    (void)s.scale(sum(p));
    set_grad(p, {g});
    s.step(opt);
    s.update();
  };
  for (float g : {1.0f, kInf, 1.0f, 1.0f}) step(a, g);
  const std::map<std::string, double> saved = a.state_dict();
  REQUIRE(saved.at("scale") == 32768.0);
  REQUIRE(saved.at("_growth_tracker") == 2.0);
  REQUIRE(saved.at("growth_interval") == 4.0);

  optim::GradScaler b;  // other defaults: the state replaces them
  b.load_state_dict(saved);
  REQUIRE(b.state_dict() == saved);
  for (float g : {1.0f, 1.0f, 1.0f, kInf, 1.0f}) {
    step(a, g);
    step(b, g);
    REQUIRE(a.state_dict() == b.state_dict());
  }
  REQUIRE(b.get_scale() == 32768.0);  // grew to 65536 after two more clean steps, then backed off

  std::map<std::string, double> broken = saved;
  broken.erase("_growth_tracker");
  REQUIRE_THROWS_WITH(b.load_state_dict(broken), Catch::Contains("has no '_growth_tracker'"));
  broken = saved;
  broken["scale"] = -1;
  REQUIRE_THROWS_WITH(b.load_state_dict(broken), Catch::Contains("the saved scale must be"));
  broken = saved;
  broken["_growth_tracker"] = 4;
  REQUIRE_THROWS_WITH(b.load_state_dict(broken), Catch::Contains("_growth_tracker must be an integer in"));
  REQUIRE(b.state_dict().at("scale") == 32768.0);  // a refused state changes nothing
}

TEST_CASE("GradScaler: ranks agree to skip through all_reduce_found_inf", "[amp]") {
  // Rank 1 alone has an inf in its (unreduced) gradient. With the flags all-reduced both ranks
  // skip and back off; without it, rank 0 would step.
  for (const bool with_comm : {true, false}) {
    INFO("communicator: " << with_comm);
    const auto errors = ember::testing::ranks::run_ranks(2, [&](std::shared_ptr<parallel::Communicator> comm) {
      Tensor p = param({1.0f, 1.0f});
      optim::SGD opt({p}, {.lr = 1.0});
      optim::GradScaler scaler({.init_scale = 4.0});
      (void)scaler.scale(sum(p));
      set_grad(p, {4.0f, comm->rank() == 1 ? kInf : 4.0f});
      scaler.unscale_(opt);
      if (with_comm) parallel::all_reduce_found_inf(scaler, opt, *comm);
      const bool stepped = scaler.step(opt);
      scaler.update();
      const bool expect_step = !with_comm && comm->rank() == 0;
      EXPECT(stepped == expect_step);
      EXPECT(scaler.get_scale() == (expect_step ? 4.0 : 2.0));
      EXPECT(same_bits(values(p), expect_step ? VF{0.0f, 0.0f} : VF{1.0f, 1.0f}));
    });
    REQUIRE(ember::testing::ranks::all_ok(errors));
  }
}

TEST_CASE("GradScaler: channels-last gradients unscale and step as NCHW ones do", "[amp][memory_format]") {
  const auto train = [](bool cl) {
    manual_seed(3);
    nn::Conv2d conv(3, 5, 3);
    if (cl) conv.to(MemoryFormat::channels_last);
    optim::Adam opt(conv.parameters(), {.lr = 0.01});
    optim::GradScaler scaler({.init_scale = 1024.0});
    Tensor x = randn({2, 3, 6, 6});
    if (cl) x = x.contiguous(MemoryFormat::channels_last);
    for (int i = 0; i < 3; ++i) {
      opt.zero_grad();
      scaler.scale(sum(mul(conv.forward(x), conv.forward(x)))).backward();
      REQUIRE(conv.weight.grad().is_contiguous(cl ? MemoryFormat::channels_last : MemoryFormat::contiguous));
      scaler.unscale_(opt);
      REQUIRE(scaler.step(opt));
      scaler.update();
    }
    return values(conv.weight);
  };
  REQUIRE(same_bits(train(true), train(false)));
}
