#pragma once
// A training step's GPU time predicted from its launch ledger (core/cuda/ledger.h), with no GPU:
// the model behind `ember explain` and `ember train --explain GPU` (docs/cuda.md, "The launch
// ledger and the step model").
//
// Note [Predicting a step from its ledger]
// Each entry of the ledger is placed on one stream, in order, and takes
//
//   t = max(bytes / (bandwidth * e_mem), flops / (peak * e_flop)) + t_launch
//
// bytes = declared reads + writes; peak = the GPU's figure for the entry's math (FP32 CUDA
// cores, TF32 or 16-bit tensor cores, FP64); e_mem and e_flop = the fraction of bandwidth and peak
// that the entry's family reached when last measured (the calibration file, one value per kernel
// family, and per convolution or GEMM shape and pass). Host-to-device and device-to-host copies
// move at the PCIe figure; a host sync costs the round trip `sync_us` (the GPU idles while the
// host reads the answer and queues the next launch); a cudaMalloc `alloc_us`. Under CUDA graphs
// the per-launch cost is the graph's `graph_launch_us` and a step has no host sync.
//
// The step's floor is the same sum with e = 1 and no launch or sync cost: the roofline of the
// work itself. A convolution or GEMM whose shape is not in the calibration is priced at its
// family's efficiency and reported as uncalibrated (its share of the prediction is printed), so
// a reader knows which part of the figure has never been measured.
//
// Data-parallel training adds the gradient all-reduce: ring all-reduce moves 2 (N - 1) / N of
// each bucket's bytes over the slowest link (NVLink inside one 8-GPU machine, InfiniBand across
// machines). Buckets of `bucket_mb` fill in reverse parameter order as backward produces their
// gradients, taken to appear evenly through backward; each bucket's all-reduce starts when it is
// full and the previous one has finished, so all but the last overlap backward's compute.

#include <map>
#include <string>
#include <vector>

#include "../core/cuda/ledger.h"

namespace ember::train {

// One GPU's figures (sources in gpu_model.cpp).
struct GpuSpec {
  std::string name;         // "h100", "h200"
  std::string description;  // "NVIDIA H100 SXM5 80 GB"
  double hbm_gbs = 0;       // memory bandwidth, GB/s (datasheet)
  double tensor16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0, fp64_tflops = 0;  // dense peaks
  int sms = 0;
  double memory_gib = 0;   // device memory
  double pcie_gbs = 0;     // host <-> device, one direction
  double nvlink_gbs = 0;   // per GPU, one direction, inside one machine
  double network_gbs = 0;  // per GPU across machines (one 400 Gb/s InfiniBand port)
};
// The GPUs the model knows ("h100", "h200"); throws naming the known ones for any other name.
const GpuSpec& gpu_spec(const std::string& name);
std::vector<std::string> known_gpus();

// Measured efficiencies (Note [Predicting a step from its ledger]).
struct Calibration {
  std::string source;  // where the numbers came from (a GPU run, its date)
  double launch_us = 2.5, graph_launch_us = 1.0, sync_us = 15, alloc_us = 100;
  double default_e_mem = 0.75, default_e_flop = 0.5;
  std::map<std::string, double> e_mem;   // per family
  std::map<std::string, double> e_flop;  // per family ("cudnn", "cublas", "optim", ...)
  std::map<std::string, double> shape_e_flop;  // per convolution / GEMM shape (LedgerEntry::shape)
  std::map<std::string, double> measured_us;   // per shape, the time last measured (informative)
};
// The calibration compiled into ember (calibration/gpu.json), or one read from a file.
Calibration default_calibration();
Calibration read_calibration(const std::string& path);

enum class Bound : uint8_t { memory, compute, launch, sync, copy };
const char* bound_name(Bound b);

struct PredictedEntry {
  double us = 0;        // predicted time of this entry, launch cost included
  double floor_us = 0;  // its roofline: e = 1, no launch cost
  double mem_us = 0, flop_us = 0;  // the two terms of the roofline (bytes at full bandwidth, flops at peak)
  Bound bound = Bound::memory;
  bool uncalibrated = false;  // a convolution / GEMM shape the calibration does not hold
};

// One row of the explanation: the entries of one (op, phase).
struct OpRow {
  std::string op, phase;
  int64_t launches = 0, host_syncs = 0;
  double bytes = 0, flops = 0, predicted_us = 0, floor_us = 0, measured_us = 0;
  bool measured = false, uncalibrated = false;
  Bound bound = Bound::memory;  // of the entries that take most of the row's time
  std::string lab;              // the kernel lab that teaches the fix, for the worst rows
};

struct StepPrediction {
  std::string gpu;
  bool graphs = false;
  int64_t launches = 0, host_syncs = 0, allocations = 0;  // launches: kernels, library calls, copies, memsets
  double bytes = 0;  // memory-bound bytes (declared reads + writes of every launch)
  double flops = 0;
  double predicted_ms = 0, floor_ms = 0, uncalibrated_ms = 0, measured_ms = -1;
  std::vector<PredictedEntry> entries;  // one per ledger entry
  std::vector<OpRow> ops;               // by predicted time, largest first
  std::vector<std::string> findings;    // named findings (a host sync in the step, per-tensor launches, ...)
};

StepPrediction predict_step(const std::vector<cuda::LedgerEntry>& ledger, const GpuSpec& gpu, const Calibration& cal,
                            bool graphs);

// Data-parallel scaling of the predicted step (the last paragraph of the Note).
struct Scaling {
  int world = 1;
  std::string link;  // "nvlink" or "network"
  double allreduce_ms = 0, exposed_ms = 0, step_ms = 0, efficiency = 1;
};
Scaling predict_scaling(const StepPrediction& step, const std::vector<cuda::LedgerEntry>& ledger, const GpuSpec& gpu,
                        double gradient_bytes, int world, double bucket_mb = 25);

// The text table `ember explain` prints, and its --json object.
std::string explain_table(const StepPrediction& p, const std::vector<Scaling>& scaling, int rows = 25);
// --json: the step, its ops, findings, scaling, and every ledger entry with its prediction.
std::string explain_json(const StepPrediction& p, const std::vector<Scaling>& scaling,
                         const std::vector<cuda::LedgerEntry>& ledger);

}  // namespace ember::train
