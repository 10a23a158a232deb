// Communicators on in-process ranks: collectives, header checks, timeouts, ranks that leave;
// launcher detection; the autograd hooks DDP builds on.

#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/inprocess_communicator.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

using namespace ember;
using namespace ember::parallel;
using namespace std::chrono_literals;

namespace {

using VD = std::vector<double>;

bool all_ok(const std::vector<std::string>& errors) {
  for (const std::string& e : errors) {
    if (!e.empty()) {
      UNSCOPED_INFO(e);
      return false;
    }
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("communicator: in-process all_reduce, broadcast, all_gather, barrier on 2 and 3 ranks", "[parallel]") {
  for (int world : {2, 3}) {
    InProcessGroup group(world);
    std::vector<VD> sums(world), avgs(world), bcast(world), gathered(world);
    std::vector<std::vector<int64_t>> isum(world);
    const auto errors = group.run([&](Communicator& comm) {
      const int r = comm.rank();
      CHECK(comm.world_size() == world);
      CHECK(comm.backend() == "inprocess");
      Tensor a = from_vector<double>({1.0 + r, 10.0 * r});
      comm.all_reduce(a);
      sums[r] = a.to_vector<double>();
      Tensor f = from_vector<float>({2.0f * r, 1.0f});
      comm.all_reduce(f, ReduceOp::avg);
      avgs[r] = f.to_vector<double>();
      Tensor i = from_vector<int64_t>({r, 1});
      comm.all_reduce(i);
      isum[r] = i.to_vector<int64_t>();
      Tensor b = full({3}, r == 1 ? 7.0 : -1.0);
      comm.broadcast(b, 1);
      bcast[r] = b.to_vector<double>();
      std::vector<Tensor> g = comm.all_gather(from_vector<double>({100.0 * r}));
      for (const Tensor& t : g) gathered[r].push_back(t.item());
      comm.barrier();
    });
    REQUIRE(all_ok(errors));
    const double n = world;
    for (int r = 0; r < world; ++r) {
      CHECK(sums[r] == VD{n + n * (n - 1) / 2, 10 * n * (n - 1) / 2});
      CHECK(avgs[r][0] == Approx(n - 1));
      CHECK(avgs[r][1] == Approx(1.0));
      CHECK(isum[r] == std::vector<int64_t>{world * (world - 1) / 2, world});
      CHECK(bcast[r] == VD{7, 7, 7});
      VD expect;
      for (int q = 0; q < world; ++q) expect.push_back(100.0 * q);
      CHECK(gathered[r] == expect);
    }
  }
}

TEST_CASE("communicator: async collectives run in issue order and write non-contiguous tensors in place", "[parallel]") {
  InProcessGroup group(2);
  std::vector<VD> out(2);
  const auto errors = group.run([&](Communicator& comm) {
    const int r = comm.rank();
    Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    m.mul_(r + 1.0);
    Tensor col = m.t();  // a non-contiguous view: the result lands in m
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(comm.all_reduce_async(col));
    Tensor s = scalar_tensor(r, {.dtype = DType::f64});
    works.push_back(comm.broadcast_async(s, 0));
    for (auto& w : works) w->wait();
    CHECK(works[0]->completed());
    out[r] = m.to_vector<double>();
    out[r].push_back(s.item());
  });
  REQUIRE(all_ok(errors));
  for (int r = 0; r < 2; ++r) CHECK(out[r] == VD{3, 6, 9, 12, 15, 18, 0});
}

TEST_CASE("communicator: mismatched collectives fail on every rank, naming rank and collective", "[parallel]") {
  SECTION("different sizes") {
    InProcessGroup group(3);
    const auto errors = group.run([&](Communicator& comm) {
      Tensor t = zeros({comm.rank() == 1 ? 5 : 4});
      comm.all_reduce(t);
    });
    for (const std::string& e : errors) {
      CHECK_THAT(e, Catch::Contains("mismatched collective"));
      CHECK_THAT(e, Catch::Contains("rank 1 called all_reduce #0 (5 float32, sum)"));
      CHECK_THAT(e, Catch::Contains("all_reduce #0"));
    }
    CHECK_THAT(errors[2], Catch::Contains("rank 2/3 (inprocess)"));
  }
  SECTION("different collectives, then the communicator stays broken") {
    InProcessGroup group(2);
    const auto errors = group.run([&](Communicator& comm) {
      Tensor t = zeros({4});
      if (comm.rank() == 0) {
        CHECK_THROWS_WITH(comm.broadcast(t, 0), Catch::Contains("rank 1 called all_reduce #0"));
      } else {
        CHECK_THROWS_WITH(comm.all_reduce(t), Catch::Contains("but rank 0 called broadcast #0"));
      }
      CHECK_FALSE(comm.failure().empty());
      comm.barrier();  // fails at once: the communicator failed earlier
    });
    for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("failed earlier"));
  }
}

TEST_CASE("communicator: a rank that stops calling collectives makes the others time out", "[parallel]") {
  InProcessGroup group(3);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = group.run([&](Communicator& comm) {
    comm.set_timeout(300ms);
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(800ms);  // alive, but late
    }
    Tensor t = ones({2});
    comm.all_reduce(t);
  });
  CHECK(seconds_since(t0) < 5);
  CHECK_THAT(errors[0], Catch::Contains("rank 0/3") && Catch::Contains("all_reduce #0") && Catch::Contains("timed out") &&
                            Catch::Contains("ranks 2 never joined"));
  CHECK_THAT(errors[1], Catch::Contains("rank 1/3") && Catch::Contains("timed out"));
  CHECK_THAT(errors[2], Catch::Contains("rank 2/3") && Catch::Contains("timed out"));
}

TEST_CASE("communicator: a rank that dies makes the others fail at once, not at the timeout", "[parallel]") {
  InProcessGroup group(3);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = group.run([&](Communicator& comm) {
    comm.set_timeout(60s);
    Tensor t = ones({2});
    comm.all_reduce(t);
    if (comm.rank() == 1) throw Error("rank 1 crashed mid-step");
    comm.all_reduce(t);
  });
  CHECK(seconds_since(t0) < 10);
  CHECK(errors[1] == "rank 1 crashed mid-step");
  CHECK_THAT(errors[0], Catch::Contains("rank 0/3") && Catch::Contains("all_reduce #1") &&
                            Catch::Contains("rank 1 left the group"));
  CHECK_THAT(errors[2], Catch::Contains("rank 1 left the group"));
}

TEST_CASE("communicator: argument errors are thrown by the caller, not by the comm thread", "[parallel]") {
  InProcessGroup group(2);
  const auto errors = group.run([&](Communicator& comm) {
    CHECK_THROWS_WITH(comm.broadcast(zeros({1}), 2), Catch::Contains("root 2 is outside a world of size 2"));
    CHECK_THROWS_WITH(comm.all_reduce(from_vector<int64_t>({1}), ReduceOp::avg), Catch::Contains("floating-point"));
    std::vector<Tensor> outs{zeros({2}), zeros({3})};
    CHECK_THROWS_WITH(comm.all_gather_async(outs, zeros({2})), Catch::Contains("does not match the input"));
    comm.barrier();  // still healthy
  });
  REQUIRE(all_ok(errors));
  CHECK_THROWS_WITH(InProcessGroup(0), Catch::Contains("at least 1"));
  InProcessGroup g(1);
  auto c = g.communicator(0);
  CHECK_THROWS_WITH(g.communicator(0), Catch::Contains("already created"));
  Tensor t = ones({3});
  c->all_reduce(t, ReduceOp::avg);  // a world of one: identity
  CHECK(t.to_vector<double>() == VD{1, 1, 1});
}

TEST_CASE("launcher: rank and world size from mpirun, Slurm and torchrun-style environments", "[parallel]") {
  auto env_of = [](std::map<std::string, std::string> vars) {
    auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
    return EnvLookup([shared](const char* name) -> const char* {
      auto it = shared->find(name);
      return it == shared->end() ? nullptr : it->second.c_str();
    });
  };
  LaunchInfo none = detect_launch(env_of({}));
  CHECK(none.launcher == "none");
  CHECK(none.world_size == 1);

  LaunchInfo ompi = detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  CHECK(ompi.launcher == "mpirun");
  CHECK((ompi.rank == 3 && ompi.world_size == 4 && ompi.local_rank == 1 && ompi.local_world_size == 2));

  LaunchInfo slurm = detect_launch(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_NUM_TASKS", "8"},
                                           {"SLURM_LOCALID", "1"}}));
  CHECK(slurm.launcher == "slurm");
  CHECK((slurm.rank == 5 && slurm.world_size == 8 && slurm.local_rank == 1));
  // An sbatch script (no job step yet): one process, whatever the allocation's size.
  CHECK(detect_launch(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}})).world_size == 1);

  LaunchInfo tr = detect_launch(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                        {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
  CHECK(tr.launcher == "torchrun");
  CHECK((tr.rank == 1 && tr.world_size == 2 && tr.local_rank == 0 && tr.master_port == 29500));
  CHECK(tr.master_addr == "10.0.0.1");

  // Agreeing variables of two launchers are fine; disagreeing ones are an error naming both.
  CHECK(detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"},
                              {"WORLD_SIZE", "2"}})).world_size == 2);
  CHECK_THROWS_WITH(detect_launch(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"RANK", "1"}, {"WORLD_SIZE", "3"}})),
                    Catch::Contains("OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE say rank 1 of 2 but RANK/WORLD_SIZE say "
                                    "rank 1 of 3"));
  CHECK_THROWS_WITH(detect_launch(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}})), Catch::Contains("is not below"));
  CHECK_THROWS_WITH(detect_launch(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})), Catch::Contains("RANK='x'"));
  CHECK_THROWS_WITH(detect_launch(env_of({{"RANK", "0"}})), Catch::Contains("must both be set"));

  // This test process runs alone: init_from_env gives a world of one.
  if (detect_launch().world_size == 1) {
    auto comm = init_from_env();
    CHECK(comm->world_size() == 1);
    CHECK(comm->rank() == 0);
  }
}

TEST_CASE("autograd: post-accumulate-grad hooks see the accumulated gradient, backward callbacks run last",
          "[autograd][parallel]") {
  Tensor w = from_vector<double>({1, 2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor v = from_vector<double>({3}, {.dtype = DType::f64, .requires_grad = true});
  std::vector<std::string> log;
  w.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    log.push_back("w " + std::to_string(leaf.grad().to_vector<double>()[1]));
    if (log.size() == 1) queue_backward_callback([&] { log.push_back("callback"); });
  });
  v.register_post_accumulate_grad_hook([&](Tensor&) { log.push_back("v"); });
  ((w * w).sum() * v.sum()).backward();  // d/dw = 2 w v = (6, 12)
  REQUIRE(log.size() == 3);
  CHECK(log[2] == "callback");
  CHECK((log[0] == "w 12.000000" || log[1] == "w 12.000000"));
  // A second backward accumulates first, then the hook sees the sum.
  log.clear();
  ((w * w).sum() * v.sum()).backward();
  CHECK(std::find(log.begin(), log.end(), "w 24.000000") != log.end());
  CHECK(!in_backward());
  CHECK_THROWS_WITH(queue_backward_callback([] {}), Catch::Contains("no backward pass is running"));
  // A throwing callback propagates out of backward and leaves no state behind.
  Tensor u = from_vector<double>({1}, {.dtype = DType::f64, .requires_grad = true});
  u.register_post_accumulate_grad_hook([](Tensor&) { queue_backward_callback([] { throw Error("callback failed"); }); });
  CHECK_THROWS_WITH((u * 2.0).sum().backward(), "callback failed");
  CHECK(!in_backward());
}
