#pragma once
// The state of one `ember train` run, shared by the files that carry it through its life: start_run
// builds it (train/run_start.cpp), the epochs and the end of the run use it (train/trainer.cpp).
// Internal to train/: users call run_training (train/trainer.h).

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "../core/profiler.h"
#include "../data/loader.h"
#include "../layers/module.h"
#include "../layers/nn_functional.h"
#include "../optim/grad_scaler.h"
#include "../optim/optim.h"
#include "../parallel/communicator.h"
#include "../parallel/ddp.h"
#include "checkpoint.h"
#include "config.h"
#include "data_setup.h"
#include "early_stopping.h"
#include "trainer.h"
#include "graph_step.h"
#include "report.h"
#include "step_guard.h"
#include "train_step.h"

namespace ember::train {

// Everything one training run holds, built by start_run and carried through the epochs. Members
// are destroyed in reverse order: the DDP wrapper before the model, loaders before the data, the
// communicator last.
struct Run {
  TrainConfig cfg;
  std::shared_ptr<parallel::Communicator> comm;
  bool distributed = false;
  bool lead = true;  // rank 0: prints, writes metrics, saves checkpoints
  Device device;
  DataInfo d;
  std::unique_ptr<data::DataLoader> loader, test_loader;
  int64_t steps_per_epoch = 0;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler;
  // Stepped after each evaluation (Note [Plateaus and early stopping] in train/early_stopping.h).
  std::unique_ptr<optim::ReduceLROnPlateau> plateau;  // --scheduler plateau
  std::unique_ptr<EarlyStopping> early_stop;          // --early-stop-patience
  // --amp (Note [Mixed-precision training] in train/train_step.cpp): the autocast dtype, and the
  // loss scaler (enabled with fp16 only; disabled, each of its calls passes its argument through).
  std::optional<DType> amp_dtype;
  std::unique_ptr<optim::GradScaler> scaler;
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<MetricsWriter> metrics;      // --metrics FILE (writes nothing without it)
  std::unique_ptr<MetricsWriter> run_metrics;  // rank 0 with --save DIR: DIR/metrics.jsonl
  std::unique_ptr<nn::CrossEntropyLoss> criterion;
  std::unique_ptr<CheckpointWriter> checkpoint;  // rank 0 with --save
  std::string run_id;
  int64_t eval_batch = 0;  // the evaluation batch: --batch-size, halved on out-of-memory
  Progress progress{true};
  std::unique_ptr<profiler::Profiler> profiler;  // --profile, --profile-trace: from the first step
  std::unique_ptr<TrainStep> train_step;         // the step, eager and captured alike
  std::unique_ptr<GraphedStep> graphed;          // --cuda-graphs
  // The running sums and the divergence flag on the device (Note [Divergence guard] in
  // train/step_guard.h); its flag is the optimizer's skip flag.
  std::unique_ptr<StepGuard> guard;
  bool metrics_enabled = false;  // a metrics stream takes the step events
  // Position and totals.
  int64_t step = 0;
  int start_epoch = 0;
  int epoch_now = 0;  // 0-based epoch of the last step
  double best_acc = -1;
  bool stopped = false;      // --max-steps reached, or interrupted
  bool interrupted = false;  // SIGINT / SIGTERM (Note [Clean interrupts])
  bool stopped_early = false;  // --early-stop-patience ended the run
  double last_finite_loss = NAN;
  int64_t last_finite_step = 0;
  double train_seconds = 0;
  int64_t train_images = 0;
  TrainSummary summary;
};

// Everything before the first step: the ranks, the configuration (resumed or resolved), data,
// loaders, model, optimizer, schedule, checkpoint state, DDP, the metrics streams and the step.
Run start_run(TrainConfig cfg);
// Two of its parts, also used by `ember explain` (train/explain.h) on a Run with no data: the
// model (from r.d's channels, image size and classes), optimizer, schedule and loss scaler; and
// the step (criterion, guard, TrainStep, and with --cuda-graphs the GraphedStep).
void build_model(Run& r, const TrainConfig& cfg);
void build_step(Run& r);

// The memory format the model's input is given in (--channels-last).
inline MemoryFormat model_input_format(const TrainConfig& c) {
  return c.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// The training state of a checkpoint now (make_training_state), with the plateau's and the early
// stopping's states as extras (Note [Plateaus and early stopping]).
io::TrainingState run_training_state(const Run& r, int64_t epochs_completed);
// Restores them from a resumed checkpoint's state (an ember::Error when one is missing).
void restore_watchers(Run& r, const io::TrainingState& st);

// One metrics event, into --metrics FILE and into the --save directory's metrics.jsonl.
void write_metrics(Run& r, const std::string& line);

// The evaluation loader, batches of `batch` (--eval-limit images at most).
std::unique_ptr<data::DataLoader> make_test_loader(const TrainConfig& cfg, const DataInfo& d, int64_t batch);

// Whether `e` is a device's out-of-memory error, and EMBER_FAULT=oom-eval-above:B's (Note [Fault
// injection] in io/fault.h): evaluation batches larger than B fail as a device would.
bool is_out_of_memory(const Error& e);
void inject_eval_oom(int64_t batch);

// Runs `body` (an evaluation with r.test_loader); on out of memory halves the evaluation batch and
// tries again, down to 1.
template <typename F>
auto with_eval_backoff(Run& r, F body) {
  for (;;) {
    try {
      inject_eval_oom(r.eval_batch);
      return body();
    } catch (const Error& e) {
      if (!is_out_of_memory(e) || r.eval_batch <= 1) throw;
      const int64_t half = r.eval_batch / 2;
      if (!r.cfg.quiet)
        std::fprintf(stderr, "ember train: evaluation ran out of memory with batch %lld; retrying with batch %lld\n",
                     static_cast<long long>(r.eval_batch), static_cast<long long>(half));
      r.eval_batch = half;
      r.test_loader = make_test_loader(r.cfg, r.d, half);
    }
  }
}

}  // namespace ember::train
