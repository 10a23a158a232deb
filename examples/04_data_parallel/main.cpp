// 04_data_parallel: data-parallel training with DistributedDataParallel — each rank trains a
// replica on its shard of every batch, gradients are averaged with an all-reduce overlapped with
// backward, and the replicas stay identical. Here the ranks are threads of one process
// (in-process communicator); started by mpirun, the same train() runs as one process per rank.
//
//   ./build/examples/04_data_parallel            # 2 ranks, one epoch of Fashion-MNIST, test accuracy
//   ./build/examples/04_data_parallel --quick    # 2 ranks, 40 steps (ctest)
//   mpirun -np 2 ./build/examples/04_data_parallel --quick
//
// Checks, then prints PASS (exit 0) or FAIL (exit 1): every rank ends with the same weights, and
// they match a single-process run over the whole batch (2 x 64 images per step) to 1e-4.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>

using namespace ember;

struct Net : nn::Module {
  nn::Linear fc1{28 * 28, 128}, fc2{128, 10};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x.flatten(1)))); }
};

struct Outcome {
  std::vector<float> weights;  // every parameter, flattened
  double first_loss = 0, last_loss = 0, test_acc = NAN;
};

// Trains `steps` steps with `per_rank` images per rank and step. comm == nullptr: one process
// (the reference). Each rank's DistributedSampler shard of batch b, put together, is exactly
// batch b of the single process with a batch of per_rank * world: the same seed shuffles the
// same order everywhere, and rank r takes every world-th index of it.
Outcome train(std::shared_ptr<parallel::Communicator> comm, int64_t per_rank, int steps, bool evaluate) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  static std::mutex init_mu;  // threads: one model initialization at a time, from the same seed
  std::unique_ptr<Net> model;
  {
    std::lock_guard<std::mutex> lock(init_mu);
    manual_seed(1);
    model = std::make_unique<Net>();
  }
  const auto dir = data::default_fashion_mnist_dir();
  auto tf = data::Compose{data::ToTensor(), data::Normalize({0.2860}, {0.3530})};
  auto train_set = std::make_shared<data::InMemoryImageDataset>(data::fashion_mnist(dir, data::Split::train));
  auto sampler = std::make_shared<data::DistributedSampler>(
      train_set->size(), data::DistributedOptions{.rank = rank, .world_size = world, .seed = 7});
  data::DataLoader loader(train_set, {.batch_size = per_rank, .seed = 7, .transform = tf,
                                      .sampler = sampler});

  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  if (comm) ddp = std::make_unique<parallel::DistributedDataParallel>(*model, comm);  // rank 0's weights everywhere
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  Outcome out;
  int step = 0;
  loader.set_epoch(0);
  for (auto& [images, labels] : loader) {
    if (step == steps) break;
    opt.zero_grad();
    Tensor loss = cross_entropy(ddp ? ddp->forward(images) : model->forward(images), labels);
    loss.backward();  // with DDP: gradients averaged over the ranks when this returns
    opt.step();
    if (step == 0) out.first_loss = loss.item();
    out.last_loss = loss.item();
    ++step;
  }
  for (const Tensor& p : model->parameters()) {
    const std::vector<float> v = p.to_vector<float>();
    out.weights.insert(out.weights.end(), v.begin(), v.end());
  }
  if (evaluate) {
    NoGradGuard g;
    data::DataLoader test(data::fashion_mnist(dir, data::Split::test), {.batch_size = 1000, .transform = tf});
    int64_t correct = 0, seen = 0;
    for (auto& [images, labels] : test) {
      correct += static_cast<int64_t>(sum(eq(argmax(model->forward(images), 1), labels).to(DType::f32)).item());
      seen += labels.numel();
    }
    out.test_acc = static_cast<double>(correct) / static_cast<double>(seen);
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(std::abs(double(b[i])), 1e-2));
  return worst;
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int64_t per_rank = 64;
  try {
    const parallel::LaunchInfo launch = parallel::detect_launch();
    const int world = launch.world_size > 1 ? launch.world_size : 2;
    const int steps = quick ? 40 : static_cast<int>(60000 / (per_rank * world));
    set_num_threads(1);  // the ranks share the machine's cores
    std::vector<std::vector<float>> weights(world);  // every rank's final weights
    Outcome mine;                                     // rank 0's run
    if (launch.world_size > 1) {
      auto comm = parallel::init_from_env();
      mine = train(comm, per_rank, steps, false);
      const std::vector<Tensor> all = comm->all_gather(from_vector<float>(mine.weights));
      for (int r = 0; r < world; ++r) weights[r] = all[r].to_vector<float>();
      if (comm->rank() != 0) return 0;  // rank 0 checks and reports
    } else {
      std::vector<Outcome> outcomes(world);
      parallel::InProcessGroup group(world);
      const std::vector<std::string> errors = group.run([&](parallel::Communicator& c) {
        // run() lends each thread its communicator; DDP wants shared ownership: borrow it.
        std::shared_ptr<parallel::Communicator> comm(&c, [](parallel::Communicator*) {});
        outcomes[c.rank()] = train(comm, per_rank, steps, false);
      });
      for (const std::string& e : errors) EMBER_CHECK(e.empty(), e);
      for (int r = 0; r < world; ++r) weights[r] = outcomes[r].weights;
      mine = outcomes[0];
    }
    const Outcome single = train(nullptr, per_rank * world, steps, !quick);
    double replica_diff = 0;
    for (int r = 1; r < world; ++r) replica_diff = std::max(replica_diff, max_rel_diff(weights[r], weights[0]));
    const double vs_single = max_rel_diff(weights[0], single.weights);
    std::printf("%d ranks x %lld images, %d steps: loss %.3f -> %.3f (single process: %.3f -> %.3f)\n", world,
                static_cast<long long>(per_rank), steps, mine.first_loss, mine.last_loss, single.first_loss,
                single.last_loss);
    std::printf("replicas differ by %.3g; DDP vs single process with the whole batch: max rel diff %.3g\n",
                replica_diff, vs_single);
    if (!quick) std::printf("test accuracy (single-process run): %.2f%%\n", 100 * single.test_acc);
    const bool pass = replica_diff == 0 && vs_single < 1e-4;
    std::printf("%s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "04_data_parallel: error: %s\nFAIL\n", e.what());
    parallel::abort_job(1);
    return 1;
  }
}
