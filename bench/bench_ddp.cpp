// Data-parallel step time: the `cnn` model on Fashion-MNIST-sized batches (synthetic images,
// global batch 128, AdamW), one JSON line per configuration:
//   ranks 1, no DDP, all cores          the baseline step
//   ranks 1, DDP on a world of one      the wrapper's own overhead (hooks, bucket copies)
//   ranks 2, in-process, 1 thread each  two replicas sharing the machine, batch 64 each
// and, when started by mpirun (`mpirun -np 2 ./build/bench/bench_ddp`), the MPI ranks instead
// (rank 0 prints). Fields: step_ms (median), images_per_sec (global), bytes_reduced_per_step,
// comm_wait_ms_per_step (time the end of backward waited for all-reduces: the communication
// that did not overlap), comm_busy_ms_per_step (time the comm thread spent in collectives).
//   ./build/bench/bench_ddp [--steps N] [--device cuda]
// With --device cuda the first two lines run on the GPU, plus DDP over a one-rank NCCL
// communicator: the 1-GPU DDP step against the plain step, i.e. the wrapper's overhead
// (scripts/gpu-check.sh; PyTorch loses about 3%). `mpirun -np N bench_ddp --device cuda` runs one
// GPU per process (NCCL where the build has it).
// On a machine shared with other work, run it with OMP_WAIT_POLICY=passive: spinning OpenMP
// workers on oversubscribed cores make the 2-thread baseline erratic (docs/distributed.md).

#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>
#include <ember/parallel/nccl_communicator.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

using namespace ember;

namespace {

constexpr int64_t kGlobalBatch = 128;
Device g_device = Device::cpu();

struct Result {
  double step_ms = 0, comm_wait_ms = 0, comm_busy_ms = 0;
  int64_t bytes_per_step = 0, buckets = 0;
};

// Trains `steps` timed steps (after 3 warm-up steps) on this rank's share of the global batch.
Result run_rank(std::shared_ptr<parallel::Communicator> comm, bool use_ddp, int steps) {
  const int world = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;
  manual_seed(1);
  auto model = models::create_model({.name = "cnn"});
  model->to(g_device);
  Generator gen(100 + rank);
  const int64_t local = kGlobalBatch / world;
  const Tensor x = randn({local, 1, 28, 28}, {}, gen).to(g_device);
  const Tensor y = randint(0, 10, {local}, {.dtype = DType::i64}, gen).to(g_device);
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  if (use_ddp) ddp = std::make_unique<parallel::DistributedDataParallel>(*model, comm);
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  std::vector<double> times;
  parallel::DDPStats before;
  double busy_before = 0;
  for (int s = 0; s < steps + 3; ++s) {
    if (s == 3) {
      if (ddp) before = ddp->stats();
      if (comm) busy_before = comm->busy_seconds();
    }
    const double t = bench::time_s([&] {
      opt.zero_grad();
      cross_entropy(ddp ? ddp->forward(x) : model->forward(x), y).backward();
      opt.step();
      if (g_device.is_cuda()) (void)model->parameters().front().sum().item();  // wait for the GPU
    });
    if (s >= 3) times.push_back(t);
  }
  Result r;
  r.step_ms = 1e3 * bench::median(times);
  if (ddp) {
    const parallel::DDPStats after = ddp->stats();
    r.bytes_per_step = (after.bytes_reduced - before.bytes_reduced) / steps;
    r.comm_wait_ms = 1e3 * (after.comm_wait_seconds - before.comm_wait_seconds) / steps;
    r.comm_busy_ms = 1e3 * (comm->busy_seconds() - busy_before) / steps;
    r.buckets = static_cast<int64_t>(ddp->bucket_assignment().size());
  }
  return r;
}

void print(const char* transport, int ranks, int threads, bool ddp, const Result& r) {
  std::printf("{\"bench\":\"ddp_step\",\"model\":\"cnn\",\"device\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,\"threads_per_rank\":%d,"
              "\"ddp\":%s,\"global_batch\":%lld,\"step_ms\":%.2f,\"images_per_sec\":%.1f,"
              "\"bytes_reduced_per_step\":%lld,\"buckets\":%lld,\"comm_wait_ms_per_step\":%.3f,"
              "\"comm_busy_ms_per_step\":%.3f,%s}\n",
              g_device.str().c_str(), transport, ranks, threads, ddp ? "true" : "false", static_cast<long long>(kGlobalBatch), r.step_ms,
              1e3 * static_cast<double>(kGlobalBatch) / r.step_ms, static_cast<long long>(r.bytes_per_step),
              static_cast<long long>(r.buckets), r.comm_wait_ms, r.comm_busy_ms, bench::machine_fields().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  std::string device = "cpu";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--device") == 0) device = argv[i + 1];
  }
  try {
    g_device = Device(device);
    const parallel::LaunchInfo li = parallel::detect_launch();
    if (li.world_size > 1) {
      if (device == "cuda") g_device = Device::cuda(li.local_rank);  // one GPU per process
      auto comm = parallel::init_from_env(g_device);
      set_num_threads(std::max(1, get_num_threads() / li.local_world_size));
      const Result r = run_rank(comm, true, steps);
      if (comm->rank() == 0) print(comm->backend().c_str(), comm->world_size(), get_num_threads(), true, r);
      return 0;
    }
    const int cores = get_num_threads();
    run_rank(nullptr, false, 3);  // warm the allocator and the thread pool before timing anything
    print("none", 1, cores, false, run_rank(nullptr, false, steps));
    {
      parallel::InProcessGroup one(1);
      print("inprocess", 1, cores, true, run_rank(one.communicator(0), true, steps));
    }
    if (g_device.is_cuda()) {
      // One GPU: the wrapper's overhead, with NCCL as the transport a multi-GPU job uses.
      if (parallel::nccl_built())
        print(
            "nccl", 1, cores, true,
            run_rank(parallel::make_nccl_communicator(0, 1, g_device.index, parallel::nccl_unique_id()), true, steps));
      return 0;
    }
    set_num_threads(1);
    parallel::InProcessGroup group(2);
    std::vector<Result> results(2);
    std::vector<std::shared_ptr<parallel::Communicator>> comms{group.communicator(0), group.communicator(1)};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { results[r] = run_rank(comms[r], true, steps); });
    for (auto& t : threads) t.join();
    print("inprocess", 2, 1, true, results[0]);
    set_num_threads(cores);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: error: %s\n", e.what());
    parallel::abort_job(1);
    return 1;
  }
  return 0;
}
