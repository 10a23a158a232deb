// The profiler on a CUDA device (the SIMT emulator in CI): every kernel call and autograd node of
// a step on cuda:0 is recorded and nested, with the op's device time (Note [Profiler]: the scope
// waits for the device before it closes).

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include <ember/core/profiler.h>
#include <ember/ember.h>

using namespace ember;

TEST_CASE("profiler: a training step on a CUDA device", "[cuda][profiler]") {
  const Device d = Device::cuda(0);
  manual_seed(5);
  Tensor x = randn({2, 3, 6, 6}).to(d);
  Tensor w = (randn({4, 3, 3, 3}) * 0.3).to(d).requires_grad_();
  Tensor y = from_vector<int64_t>({1, 3}).to(d);
  profiler::Profiler prof;
  {
    const profiler::Scope step("step", profiler::Phase::step);
    Tensor loss = cross_entropy(relu(conv2d(x, w, Tensor(), {.padding = {1, 1}})).flatten(1).narrow(1, 0, 10), y);
    loss.backward();
  }
  prof.stop();
  std::map<std::string, int> count;
  for (const profiler::Event& e : prof.events()) {
    count[e.name] += 1;
    CHECK(e.end_ns >= e.start_ns);
    if (e.depth > 0) {
      bool inside = false;
      for (const profiler::Event& p : prof.events())
        inside = inside || (p.thread == e.thread && p.depth == e.depth - 1 && p.start_ns <= e.start_ns &&
                            e.end_ns <= p.end_ns);
      INFO(e.name);
      CHECK(inside);
    }
  }
  CHECK(count["step"] == 1);
  CHECK(count["conv2d"] == 1);
  CHECK(count["Conv2dBackward"] == 1);
  CHECK(count["AccumulateGrad"] == 1);
  CHECK(prof.events().size() >= 10);  // the elementwise, reduction and loss kernels of the step
  CHECK(prof.table().find("conv2d") != std::string::npos);
}
