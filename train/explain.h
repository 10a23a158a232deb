#pragma once
// One training step's launch ledger, priced on a named GPU: `ember explain` (a model, batch and
// image size, no data) and `ember train ... --device cuda --explain GPU` (the run's first batch).
// docs/cuda.md explains the output; train/gpu_model.h the prediction.

#include <string>
#include <vector>

#include "../core/cuda/ledger.h"
#include "../core/tensor.h"
#include "config.h"
#include "gpu_model.h"

namespace ember::train {

struct Run;  // train/run.h

struct ExplainOptions {
  std::string gpu = "h100";       // the GPU to predict for (gpu_model.h's table)
  std::string calibration;        // a calibration file; empty: the compiled-in calibration/gpu.json
  std::vector<int> world_sizes;   // data-parallel scaling rows (none: no scaling table)
  bool json = false;              // print one JSON object instead of the table
  int rows = 25;                  // table rows (op, phase), largest first
};

struct ExplainResult {
  std::vector<cuda::LedgerEntry> ledger;  // the step's entries
  StepPrediction prediction;
  std::vector<Scaling> scaling;
  std::string text;  // the table or the JSON object, as `ember explain` prints it
};

// Runs two warm-up steps and then one step under a ledger on r's CUDA device, on `images` (N, C, H,
// W) and `labels` (N,) already on the host: on the SIMT emulator every step is record-only (the
// kernels are recorded and skipped), on a real GPU the warm-up runs and the step is timed with
// CUDA events. r must hold a model, optimizer and step (start_run, or explain_run below).
ExplainResult explain_step(Run& r, const Tensor& images, const Tensor& labels, const ExplainOptions& o);

// `ember explain`: cfg's model, optimizer and step on cfg.device (a CUDA device), with no data set
// behind them, explained on a batch of cfg.batch_size random images of `channels` x
// cfg.image_size² and random labels of `classes` classes.
ExplainResult explain_model(const TrainConfig& cfg, int64_t channels, int64_t classes, const ExplainOptions& o);

// Before the first CUDA call of a process that will explain a full-size step on the emulator: no
// 0xFF poisoning of new device memory (it would touch every byte no kernel will write) and an
// emulated device as large as the named GPU's memory.
void prepare_emulator_for_explain(const std::string& gpu);

}  // namespace ember::train
