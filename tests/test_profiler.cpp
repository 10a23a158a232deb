// The profiler (core/profiler.h, Note [Profiler]): what it records (every kernel call and autograd
// node, nested, with phases and FLOPs), self times that add up, nothing when off, the table, and
// the Chrome trace written by `ember train --profile-trace` read back as JSON with its nesting.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include <ember/core/profiler.h>
#include <ember/ember.h>
#include <ember/train/config.h>
#include <ember/train/trainer.h>

#include "test_util.h"

using namespace ember;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

// One conv -> relu -> linear -> cross-entropy step, forward and backward.
void small_step() {
  manual_seed(3);
  Tensor x = randn({4, 3, 8, 8});
  Tensor w = (randn({5, 3, 3, 3}) * 0.2).requires_grad_(), b = zeros({5}, {.requires_grad = true});
  Tensor fc = (randn({10, 5 * 8 * 8}) * 0.05).requires_grad_();
  Tensor y = from_vector<int64_t>({1, 2, 3, 4});
  Tensor h = relu(conv2d(x, w, b, {.padding = {1, 1}}));
  Tensor loss = cross_entropy(linear(h.flatten(1), fc, Tensor()), y);
  loss.backward();
}

// The event that directly encloses `e` on its thread (depth - 1, containing it), or nullptr.
const profiler::Event* parent_of(const std::vector<profiler::Event>& events, const profiler::Event& e) {
  const profiler::Event* best = nullptr;
  for (const profiler::Event& p : events)
    if (p.thread == e.thread && p.depth == e.depth - 1 && p.start_ns <= e.start_ns && e.end_ns <= p.end_ns) best = &p;
  return best;
}

}  // namespace

TEST_CASE("profiler: kernel calls and autograd nodes, nested, with phases, FLOPs and self times", "[profiler]") {
  profiler::Profiler prof;
  {
    const profiler::Scope outer("my step", profiler::Phase::step);
    small_step();
  }
  prof.stop();
  const std::vector<profiler::Event>& ev = prof.events();
  std::map<std::string, int> count;
  for (const profiler::Event& e : ev) count[e.name] += 1;
  CHECK(count["my step"] == 1);
  CHECK(count["conv2d"] >= 1);
  CHECK(count["Conv2dBackward"] == 1);
  CHECK(count["conv2d backward"] == 1);
  CHECK(count["AccumulateGrad"] == 3);  // w, b, fc
  for (const profiler::Event& e : ev) {
    CHECK(e.end_ns >= e.start_ns);
    if (e.depth > 0) {
      INFO(e.name << " at depth " << e.depth);
      REQUIRE(parent_of(ev, e) != nullptr);  // every inner scope lies inside its parent
    }
    const std::string name = e.name;
    if (name == "Conv2dBackward" || name == "AccumulateGrad" || name == "conv2d backward")
      CHECK(e.phase == profiler::Phase::backward);  // run by the autograd engine
    if (name == "conv2d" && e.depth == 1) {
      CHECK(e.phase == profiler::Phase::step);  // inherited from the enclosing phase scope
      // 2 * N * C_out * H * W * C_in * 3 * 3
      CHECK(e.flops == Approx(2.0 * 4 * 5 * 8 * 8 * 3 * 9));
    }
  }
  // The conv2d backward scope sits inside the node that runs it.
  for (const profiler::Event& e : ev)
    if (std::string(e.name) == "conv2d backward") CHECK(std::string(parent_of(ev, e)->name) == "Conv2dBackward");

  // Self times add up to the outermost scope's time; each self time is at most its total.
  double self = 0, outer = 0;
  for (const profiler::OpStats& s : prof.stats()) {
    CHECK(s.self_ms <= s.total_ms + 1e-9);
    self += s.self_ms;
    if (s.name == "my step") outer = s.total_ms;
  }
  CHECK(self == Approx(outer).epsilon(1e-6));
  const std::string table = prof.table();
  CHECK(table.find("Conv2dBackward") != std::string::npos);
  CHECK(table.find("GFLOP/s") != std::string::npos);
}

TEST_CASE("profiler: records nothing when off, one profiler at a time, names outlive their strings", "[profiler]") {
  small_step();  // no profiler: scopes are no-ops
  {
    profiler::Profiler prof;
    CHECK(error_of([] { profiler::Profiler second; }).find("another Profiler is already recording") !=
          std::string::npos);
    {
      std::string name = "temporary name";
      const profiler::Scope s(name);
      name = "overwritten";  // interned at the scope's start
    }
    prof.stop();
    REQUIRE(prof.events().size() == 1);  // nothing from before the profiler started
    CHECK(std::string(prof.events()[0].name) == "temporary name");
  }
  small_step();  // stopped: nothing recorded, nothing breaks
  profiler::Profiler again;  // and a new one may start
  again.stop();
  CHECK(again.events().empty());
}

TEST_CASE("profiler: ember train --profile-trace writes a Chrome trace of the steps", "[profiler][train]") {
  const testing::TempDir dir("ember_test_profiler");
  train::TrainConfig c;
  c.model = "cnn";
  c.optimizer = "adam";
  c.max_steps = 3;
  c.eval_limit = 64;
  c.batch_size = 32;
  c.quiet = true;
  c.profile_trace = (dir.path / "trace.json").string();
  train::run_training(c);

  std::ifstream f(c.profile_trace);
  REQUIRE(f.good());
  const nlohmann::json doc = nlohmann::json::parse(f);  // throws on anything but whole JSON
  REQUIRE(doc.contains("traceEvents"));
  struct Ev {
    std::string name, cat;
    double ts, dur;
    int tid, depth;
  };
  std::vector<Ev> evs;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    evs.push_back({e["name"], e["cat"], e["ts"], e["dur"], e["tid"], e["args"]["depth"]});
  }
  std::map<std::string, int> steps_of;
  std::set<std::string> names;
  for (const Ev& e : evs) names.insert(e.name);
  for (const char* want : {"step", "forward", "backward", "optimizer", "next batch", "to device", "conv2d",
                           "Conv2dBackward", "evaluate", "Adam.step"}) {
    INFO(want);
    CHECK(names.count(want) == 1);
  }
  // Nesting: every event lies inside an event one level up on its thread; the parts of a step
  // lie inside a "step"; conv2d runs inside forward (training) or evaluate, Conv2dBackward inside
  // backward.
  auto parent = [&](const Ev& e) -> const Ev* {
    const Ev* best = nullptr;
    for (const Ev& p : evs)
      if (p.tid == e.tid && p.depth == e.depth - 1 && p.ts <= e.ts + 1e-3 && e.ts + e.dur <= p.ts + p.dur + 1e-3)
        best = &p;
    return best;
  };
  int steps = 0;
  for (const Ev& e : evs) {
    if (e.name == "step") {
      ++steps;
      CHECK(e.depth == 0);
      CHECK(e.cat == "step");
    }
    if (e.depth == 0) continue;
    const Ev* p = parent(e);
    INFO(e.name << " at depth " << e.depth);
    REQUIRE(p != nullptr);
    if (e.name == "forward" || e.name == "backward" || e.name == "optimizer" || e.name == "to device")
      CHECK(p->name == "step");
    if (e.name == "Conv2dBackward") CHECK(p->name == "backward");
    if (e.name == "Conv2dBackward") CHECK(e.cat == "backward");
    if (e.name == "conv2d") CHECK((p->name == "forward" || p->name == "evaluate"));
  }
  CHECK(steps == 3);
}
