#pragma once
// What `ember train` builds from its TrainConfig before the first step, besides data and model:
// the optimizer's param groups, the optimizer, the LR schedule, and the metrics' config event.
// Internal to train/ (trainer.cpp).

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "../layers/module.h"
#include "../optim/optim.h"
#include "config.h"
#include "data_setup.h"
#include "checkpoint.h"

namespace ember::train {

// One param group, or with --finetune: the backbone's (lr * --backbone-lr-scale, or none at all
// with --freeze-backbone) and the classifier's (Note [Fine-tuning] in train/finetune.h).
std::vector<optim::ParamGroup> param_groups(const TrainConfig& c, const nn::Module& model);

// --optimizer adam | adamw | sgd (Nesterov when --momentum > 0) with --lr and --weight-decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<optim::ParamGroup>& groups);

// --scheduler and --warmup-epochs as one schedule stepped once per optimizer step (lengths in
// steps); null for a constant lr.
std::shared_ptr<optim::LRScheduler> make_scheduler(const TrainConfig& c, optim::Optimizer& opt, int64_t steps_per_epoch);

// --scheduler plateau: optim::ReduceLROnPlateau on --plateau-metric (mode max for an accuracy,
// min for a loss; threshold 1e-4 relative, cooldown 0, min_lr 0, as PyTorch's defaults), stepped
// after each evaluation; null for any other --scheduler.
std::unique_ptr<optim::ReduceLROnPlateau> make_plateau(const TrainConfig& c, optim::Optimizer& opt);

// The metrics' "config" event (docs/metrics.md): every setting of the run and the data's facts.
nlohmann::json config_json(const TrainConfig& c, const DataInfo& d, int64_t steps_per_epoch);

}  // namespace ember::train
