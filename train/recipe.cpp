// The default recipe and the validation of a TrainConfig.

#include <algorithm>
#include <sstream>

#include "../core/error.h"
#include "../models/zoo.h"
#include "trainer.h"

namespace ember::train {

namespace {
bool was_set(const TrainConfig& c, const std::string& name) {
  return std::find(c.explicitly_set.begin(), c.explicitly_set.end(), name) != c.explicitly_set.end();
}
}  // namespace

std::vector<std::string> resolve(TrainConfig& c) {
  // The default recipe (Fashion-MNIST, 2 CPU cores, a few minutes): the `cnn` model, AdamW with
  // a one-cycle schedule, light augmentation (random 2-pixel shifts; mirror images for
  // Fashion-MNIST only — mirrored digits are other digits) and label smoothing. Any value the
  // user gave is kept; the rest come from the recipe.
  std::vector<std::string> chose;
  auto pick = [&](bool unset, const std::string& what) {
    if (unset) chose.push_back(what);
  };
  const bool recipe = c.optimizer.empty();  // nothing recipe-related given: the tuned defaults
  pick(c.model.empty(), "model cnn");
  if (c.model.empty()) c.model = "cnn";
  pick(c.optimizer.empty(), "optimizer adamw");
  if (c.optimizer.empty()) c.optimizer = "adamw";
  pick(c.epochs < 0, "epochs 10");
  if (c.epochs < 0) c.epochs = 10;
  pick(c.batch_size < 0, "batch size 128");
  if (c.batch_size < 0) c.batch_size = recipe ? 128 : 64;
  if (c.lr < 0) {
    c.lr = recipe ? 3e-3 : (c.optimizer == "sgd" ? 0.05 : 1e-3);
    chose.push_back("lr " + std::to_string(c.lr));
  }
  if (c.weight_decay < 0) {
    c.weight_decay = c.optimizer == "adamw" ? (recipe ? 5e-4 : 1e-2) : (c.optimizer == "sgd" ? 5e-4 : 0.0);
    chose.push_back("weight decay " + std::to_string(c.weight_decay));
  }
  if (c.scheduler.empty()) {
    c.scheduler = recipe ? "onecycle" : "none";
    chose.push_back("scheduler " + c.scheduler);
  }
  if (c.warmup_epochs < 0) c.warmup_epochs = 0;
  if (c.label_smoothing < 0) {
    c.label_smoothing = recipe ? 0.1 : 0.0;
    if (recipe) chose.push_back("label smoothing 0.1");
  }
  return chose;
}

void validate(const TrainConfig& c) {
  EMBER_CHECK(c.epochs >= 1, "--epochs must be at least 1, got ", c.epochs);
  EMBER_CHECK(c.batch_size >= 1, "--batch-size must be at least 1, got ", c.batch_size);
  EMBER_CHECK(c.lr > 0, "--lr must be positive, got ", c.lr);
  EMBER_CHECK(c.weight_decay >= 0, "--weight-decay must be non-negative, got ", c.weight_decay);
  EMBER_CHECK(c.momentum >= 0 && c.momentum < 1, "--momentum must be in [0, 1), got ", c.momentum);
  EMBER_CHECK(c.label_smoothing >= 0 && c.label_smoothing <= 1, "--label-smoothing must be in [0, 1], got ",
              c.label_smoothing);
  EMBER_CHECK(c.warmup_epochs >= 0 && c.warmup_epochs < c.epochs, "--warmup-epochs must be in [0, epochs), got ",
              c.warmup_epochs);
  EMBER_CHECK(c.optimizer == "adam" || c.optimizer == "adamw" || c.optimizer == "sgd", "--optimizer must be adam, "
              "adamw or sgd, got '", c.optimizer, "'");
  EMBER_CHECK(c.scheduler == "none" || c.scheduler == "step" || c.scheduler == "cosine" || c.scheduler == "onecycle",
              "--scheduler must be none, step, cosine or onecycle, got '", c.scheduler, "'");
  const std::vector<std::string> names = models::model_names();
  EMBER_CHECK(std::find(names.begin(), names.end(), c.model) != names.end(), "unknown model '", c.model,
              "' (known models: simple_cnn, cnn, resnet18, resnet18_cifar, resnet_small)");
  EMBER_CHECK(c.eval_every >= 1, "--eval-every must be at least 1, got ", c.eval_every);
  EMBER_CHECK(c.eval_limit >= 0, "--eval-limit must be 0 (all) or a positive count, got ", c.eval_limit);
  EMBER_CHECK(c.max_steps == -1 || c.max_steps >= 1, "--max-steps must be at least 1, got ", c.max_steps);
  EMBER_CHECK(c.threads >= 0, "--threads must be non-negative, got ", c.threads);
  EMBER_CHECK(c.workers >= 0, "--workers must be non-negative, got ", c.workers);
  EMBER_CHECK(c.log_every >= 1, "log interval must be at least 1");
}

}  // namespace ember::train
