#pragma once
// Run reports: what `ember train --save DIR` leaves in DIR for people to look at, and the one
// self-contained HTML page `ember report` makes of it (docs/training.md, "Run reports").
//
//   DIR/metrics.jsonl    the metrics stream (docs/metrics.md); a resumed run appends to it
//   DIR/evaluation.json  the last evaluation: confusion matrix, per-class accuracy and the most
//                        confidently misclassified test images with PNG thumbnails
//   DIR/report.html      write_run_report: curves, confusion matrix, mistakes, configuration,
//                        environment; opens from disk with no network
//
// Comparing runs: write_run_report({A, B, C}, out) overlays their curves in one page.

#include <cstdint>
#include <string>
#include <vector>

#include "inference.h"
#include "trainer.h"

namespace ember::train {

inline constexpr const char* kMetricsFileName = "metrics.jsonl";
inline constexpr const char* kEvaluationFileName = "evaluation.json";
inline constexpr const char* kReportFileName = "report.html";
// How many of the most confident mistakes the final evaluation of a saved run keeps.
inline constexpr int64_t kReportMistakes = 24;

// A thumbnail of one test image as the model saw it (after the eval transform), un-normalized
// back to [0, 255], box-downscaled to at most `max_side` pixels a side, as PNG bytes.
// image: (C, H, W) f32 on the CPU, C = 1 or 3; mean, std: per channel, as Normalize used them.
std::string thumbnail_png(const Tensor& image, const std::vector<double>& mean, const std::vector<double>& std,
                          int64_t max_side = 64);

// Writes DIR/evaluation.json (atomically): the evaluation `ev` of the model after `step` steps.
void write_evaluation_file(const std::string& path, const EvalResult& ev, const std::vector<std::string>& classes,
                           int epoch, int64_t step);

// Reads each run directory (its metrics.jsonl, and evaluation.json when there is one) and writes
// the report to `out` with io::write_file_atomic. Throws ember::Error naming the directory or the
// line for a missing directory, a directory without metrics.jsonl, a damaged or truncated metrics
// line; nothing is written then.
void write_run_report(const std::vector<std::string>& run_dirs, const std::string& out);

// What `ember info --json` prints: version, build, CPU and its instruction sets, GEMM kernels,
// threads, CUDA devices (one JSON object; indent as nlohmann::json::dump's).
std::string environment_json(int indent = -1);

}  // namespace ember::train
