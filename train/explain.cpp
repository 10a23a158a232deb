// One training step explained (train/explain.h).
//
// Note [Explaining a step]
// What is recorded is the step the trainer runs (TrainStep, Note [One training step]): forward
// under autocast, the loss, backward, clipping, the scaler and the optimizer, with the batch
// already on the device (its upload belongs to the data phase, not to the step). Two warm-up steps
// come first, so that the ledgered step is the steady state: the optimizer's moments exist, the
// cuDNN algorithms are chosen, and the caching allocator holds its blocks (ResNet-18's second step
// still reaches cudaMalloc 9 times, its third none).
//
// On the SIMT emulator every step is record-only (Note [Launch ledger]): every launch is
// recorded with its declared cost and skipped, so ResNet-18 at batch 256 and 224² walks in
// seconds on two cores. Copies and memsets still run, so the host's reads (the loss, the target
// check, the scaler's found-inf flag) read zeros or memset values, never garbage; the step's
// numbers are meaningless and nothing reads them. The emulated device is made as large as the
// named GPU and new memory is not poisoned (prepare_emulator_for_explain), so the untouched
// activations cost address space, not RAM.
//
// On a real GPU the warm-up steps run and the ledgered step is timed: two CUDA events around
// every launch, read once at the end (no host sync inside the step beyond its own).
//
// With --cuda-graphs the ledgered step is the captured step (StepMode::captured: the scaler's
// skip and the clipping decided on the device) run once outside a graph, and priced with the
// graph's launch cost; replaying a graph launches exactly what its capture recorded.

#include "explain.h"

#include <cstdlib>
#include <string>

#include "../core/error.h"
#include "../core/generator.h"
#include "../layers/modules.h"
#include "../optim/optim.h"
#include "data_setup.h"
#include "run.h"
#include "run_setup.h"
#include "train_step.h"
#include "trainer.h"

namespace ember::train {

namespace {

bool on_emulator() {
#if EMBER_SIMT
  return true;
#else
  return false;
#endif
}

}  // namespace

void prepare_emulator_for_explain(const std::string& gpu) {
  if (!on_emulator()) return;
  const GpuSpec& g = gpu_spec(gpu);
  setenv("EMBER_SIMT_POISON", "0", 1);
  setenv("EMBER_SIMT_DEVICE_MEMORY", std::to_string(static_cast<long long>(g.memory_gib * (1LL << 30))).c_str(), 1);
}

namespace {

Run explain_run(const TrainConfig& config, int64_t channels, int64_t classes) {
  TrainConfig cfg = config;
  resolve(cfg);
  validate(cfg);
  Run r;
  r.device = resolve_device(cfg.device);
  EMBER_CHECK(r.device.is_cuda(), "ember explain: the step is explained on a CUDA device (--device cuda), not ",
              r.device);
  r.d.channels = channels;
  r.d.image_size = cfg.image_size;
  for (int64_t c = 0; c < classes; ++c) r.d.classes.push_back("class " + std::to_string(c));
  r.steps_per_epoch = 1;
  build_model(r, cfg);
  r.cfg = cfg;
  r.progress = Progress(true);
  build_step(r);
  return r;
}

}  // namespace

ExplainResult explain_step(Run& r, const Tensor& images, const Tensor& labels, const ExplainOptions& o) {
  EMBER_CHECK(r.device.is_cuda(), "--explain: the step is explained on a CUDA device (--device cuda), not ", r.device);
  const GpuSpec& gpu = gpu_spec(o.gpu);
  const Calibration cal = o.calibration.empty() ? default_calibration() : read_calibration(o.calibration);
  const StepMode mode = r.cfg.cuda_graphs ? StepMode::captured : StepMode::eager;
  const Tensor x = images.to(r.device).contiguous(model_input_format(r.cfg));
  check_class_indices(labels, static_cast<int64_t>(r.d.classes.size()));
  const Tensor y = labels.to(r.device);
  const cuda::LedgerMode ledger_mode = on_emulator() ? cuda::LedgerMode::record_only : cuda::LedgerMode::timed;
  {
    // The warm-up steps: record-only on the emulator (their ledger is dropped), run on a GPU.
    std::unique_ptr<cuda::Ledger> warm_up;
    if (on_emulator()) warm_up = std::make_unique<cuda::Ledger>(cuda::LedgerMode::record_only);
    r.model->train();
    const profiler::Scope step("step", profiler::Phase::step);
    for (int64_t step_number = 1; step_number <= 2; ++step_number) (void)r.train_step->run(x, y, mode, step_number);
  }
  ExplainResult out;
  {
    cuda::Ledger ledger(ledger_mode);
    const profiler::Scope step("step", profiler::Phase::step);
    (void)r.train_step->run(x, y, mode, 3);
    out.ledger = ledger.stop();
  }
  out.prediction = predict_step(out.ledger, gpu, cal, r.cfg.cuda_graphs);
  double gradient_bytes = 0;
  for (const Tensor& p : r.model->parameters())
    if (p.requires_grad()) gradient_bytes += static_cast<double>(p.nbytes());
  for (int world : o.world_sizes)
    out.scaling.push_back(predict_scaling(out.prediction, out.ledger, gpu, gradient_bytes, world));
  out.text = o.json ? explain_json(out.prediction, out.scaling, out.ledger) + "\n" : explain_table(out.prediction, out.scaling, o.rows);
  return out;
}

ExplainResult explain_model(const TrainConfig& cfg, int64_t channels, int64_t classes, const ExplainOptions& o) {
  Run r = explain_run(cfg, channels, classes);
  manual_seed(r.cfg.seed);
  const Tensor images = randn({r.cfg.batch_size, channels, r.cfg.image_size, r.cfg.image_size});
  const Tensor labels = randint(0, classes, {r.cfg.batch_size});
  return explain_step(r, images, labels, o);
}

}  // namespace ember::train
