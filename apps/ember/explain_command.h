#pragma once
// `ember explain`: one full-size training step's launch ledger, priced on a named GPU, with no
// data and (on the SIMT emulator) no kernel run (train/explain.h, docs/cuda.md).

#include <string>
#include <vector>

#include "../../train/config.h"
#include "../../train/explain.h"

namespace ember::app {

struct ExplainCli {
  train::TrainConfig cfg;        // --model, --batch-size, --image-size, --amp, --channels-last, --cuda-graphs, ...
  train::ExplainOptions options;  // --gpu, --json, --calibration, --world-size
  int64_t channels = 3, classes = 1000;
};

// Builds the model and step, records one step and prints the table (or --json); returns 0.
int run_explain(ExplainCli cli);

}  // namespace ember::app
