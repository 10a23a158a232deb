// Fault injection under mpirun, driven by tests/parallel/mpi_faults.sh:
//   ember_mpi_fault kill   the last rank SIGKILLs itself in the middle of step 2's backward
//   ember_mpi_fault hang   the last rank stops (sleeps) at step 2 without dying
// The other ranks must end with a clear error naming their rank and the collective within
// EMBER_DIST_TIMEOUT (or be ended by mpirun when it sees the killed rank), never hang.

#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "ddp_scenarios.h"

using namespace ember;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "hang") {
    std::fprintf(stderr, "usage: ember_mpi_fault kill|hang\n");
    return 2;
  }
  set_num_threads(1);
  int rank = -1;
  try {
    auto comm = parallel::init_from_env();
    rank = comm->rank();
    const bool victim = rank == comm->world_size() - 1;
    auto m = ember::testing::ddp::make_model(1, DType::f32);
    parallel::DistributedDataParallel ddp(*m, comm, {.bucket_cap_bytes = 256});
    int step = 0;
    if (victim && mode == "kill") {
      // fc2.weight's gradient arrives mid-backward: bucket 0 is already on the wire.
      m->fc2.weight.register_post_accumulate_grad_hook([&](Tensor&) {
        if (step == 2) std::raise(SIGKILL);
      });
    }
    const ember::testing::ddp::Batch b = ember::testing::ddp::make_batch(8, DType::f32, 3 + rank);
    optim::SGD opt(m->parameters(), {.lr = 0.1});
    for (step = 0; step < 5; ++step) {
      if (victim && mode == "hang" && step == 2) std::this_thread::sleep_for(std::chrono::hours(1));
      opt.zero_grad();
      cross_entropy(ddp(b.x), b.y).backward();
      opt.step();
      std::fprintf(stderr, "rank %d: step %d done\n", rank, step);
    }
    std::fprintf(stderr, "rank %d: finished (unexpected)\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_mpi_fault: rank %d: error: %s\n", rank, e.what());
    parallel::abort_job(1);
    return 1;
  }
}
