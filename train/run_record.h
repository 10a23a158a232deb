#pragma once
// A run directory as the report reads it (train/run_report.cpp reads, train/report_page.cpp draws).
// Internal to train/: the page is the interface (train/run_report.h).

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ember::train {

// One `step` event (docs/metrics.md); acc is NaN in metrics written before it was recorded.
struct StepPoint {
  int epoch = 0;
  double loss = NAN, acc = NAN, lr = NAN, images_per_sec = NAN;
};

struct RunRecord {
  std::string dir;   // as given
  std::string name;  // the directory's name, made unique among the runs compared
  std::string color;
  nlohmann::json config;                 // the latest `config` event
  std::map<int64_t, StepPoint> steps;    // by step
  std::map<int, nlohmann::json> epochs;  // `epoch` events by epoch
  nlohmann::json summary, diverged;      // null when the stream has none
  nlohmann::json evaluation;             // evaluation.json; null when there is none
  int64_t steps_per_epoch = 1;
};

// Reads DIR/metrics.jsonl and DIR/evaluation.json. Events of a resumed run replace what the
// stream recorded past the checkpoint it resumed from. Throws ember::Error for a missing
// directory or stream, an empty stream, a line that is not a JSON object or is cut short, and a
// stream without a `config` event.
RunRecord read_run(const std::string& dir);

// The whole HTML page for these runs (at least one).
std::string report_page(const std::vector<RunRecord>& runs);

}  // namespace ember::train
