#pragma once
// EarlyStopping: `ember train --early-stop-patience P` (Note [Plateaus and early stopping]).

#include <cstdint>
#include <map>
#include <string>

namespace ember::train {

// Note [Plateaus and early stopping]
// Two things watch the metric of each evaluation (every --eval-every epochs, and after the last):
// --scheduler plateau (optim::ReduceLROnPlateau: the lr times --plateau-factor after more than
// --plateau-patience evaluations without an improvement of 1e-4 relative) and
// --early-stop-patience P (EarlyStopping: the run ends after P evaluations in a row without any
// improvement, as PyTorch Lightning's EarlyStopping with min_delta 0). Each watches a metric the
// run produces, checked before the first step (resolve_monitored in train/config.h): the loss or
// the accuracy of the evaluation set, named val_* when it is a held-out validation set (ImageFolder
// --val or --val-split) and test_* when it is the test set; a loss is to be lowered (mode min), an
// accuracy raised (mode max). Both states are in the training state (extras "plateau.<key>" and
// "early_stop.<key>"), and the lr a plateau lowered is the optimizer's. A checkpoint is written
// before its epoch's evaluation (which could fail); when either watches, the checkpoint is written
// again after the evaluation has stepped them, so a resumed run continues with the decisions an
// uninterrupted run took. A run that stopped early says so in its printed summary, in the
// metrics' summary event ("stop_reason": "early_stop" and "stop_detail") and in the report, and a
// --resume of it trains no further.
class EarlyStopping {
 public:
  enum class Mode { min, max };
  // patience >= 1: evaluations in a row without improvement before should_stop().
  EarlyStopping(Mode mode, int64_t patience);

  // One evaluation's metric (NaN is never an improvement), and where it was taken (ember train:
  // the 1-based epoch); returns should_stop().
  bool step(double metric, int64_t at);
  bool should_stop() const { return bad_ >= patience_; }
  double best() const { return best_; }
  int64_t best_at() const { return best_at_; }  // the best step's `at`; 0 before any improvement
  int64_t evaluations() const { return evaluations_; }

  // "best", "bad", "evaluations", "best_at"
  std::map<std::string, double> state_dict() const;
  // Throws ember::Error naming a missing key.
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  Mode mode_;
  int64_t patience_;
  double best_;
  int64_t bad_ = 0, evaluations_ = 0, best_at_ = 0;
};

}  // namespace ember::train
