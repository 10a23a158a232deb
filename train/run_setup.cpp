// What `ember train` builds from its TrainConfig: param groups, optimizer, schedule, config
// event. See run_setup.h.

#include "run_setup.h"

#include <algorithm>
#include <cmath>

#include "../core/cpu/parallel.h"
#include "finetune.h"
#include "trainer.h"

namespace ember::train {

using json = nlohmann::json;

std::vector<optim::ParamGroup> param_groups(const TrainConfig& c, const nn::Module& model) {
  if (!c.finetune) return {{.params = model.parameters()}};
  ParameterSplit split = split_parameters(model, c.model);
  if (c.freeze_backbone) return {{.params = split.classifier}};
  return {{.params = split.backbone, .lr = c.lr * c.backbone_lr_scale}, {.params = split.classifier}};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<optim::ParamGroup>& groups) {
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(groups, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  return std::make_unique<optim::SGD>(
      groups, optim::SGDOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay, .nesterov = c.momentum > 0});
}

// Every schedule is stepped once per optimizer step; lengths are in steps. Epoch-based ones
// (multistep, exponential) change the lr at the steps that end those epochs, as PyTorch's
// schedulers stepped once per epoch: exponential:G is StepLR(step_size = the epoch's steps, G),
// whose lrs are ExponentialLR's per epoch (both multiply the current lr by G). After a warmup
// (SequentialLR) the epochs count from the warmup's end, as in torchvision's reference scripts.
std::shared_ptr<optim::LRScheduler> make_scheduler(const TrainConfig& c, optim::Optimizer& opt, int64_t steps_per_epoch) {
  const ScheduleSpec spec = parse_scheduler(c.scheduler);
  if (spec.kind == "plateau") return nullptr;  // optim::ReduceLROnPlateau, stepped per evaluation (make_plateau)
  const int64_t total = static_cast<int64_t>(c.epochs) * steps_per_epoch;
  const auto warmup = static_cast<int64_t>(std::llround(c.warmup_epochs * static_cast<double>(steps_per_epoch)));
  std::shared_ptr<optim::LRScheduler> main;
  if (c.scheduler == "onecycle") {
    // One-cycle has its own warmup (the first 30% by default, or --warmup-epochs).
    // Each group peaks at its own lr (the backbone's scaled with --backbone-lr-scale).
    std::vector<double> max_lr;
    for (size_t g = 0; g < opt.num_param_groups(); ++g) max_lr.push_back(opt.get_lr(g));
    optim::OneCycleLROptions o{.max_lr = max_lr, .total_steps = total};
    if (warmup > 0) o.pct_start = static_cast<double>(warmup) / static_cast<double>(total);
    return std::make_shared<optim::OneCycleLR>(opt, o);
  }
  const int64_t rest = std::max<int64_t>(1, total - warmup);
  if (c.scheduler == "cosine") {
    main = std::make_shared<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.t_max = rest});
  } else if (c.scheduler == "step") {
    // x0.1 at 50% and 75% of the (post-warmup) run.
    main = std::make_shared<optim::MultiStepLR>(opt, optim::MultiStepLROptions{.milestones = {rest / 2, rest * 3 / 4}});
  } else if (spec.kind == "multistep") {
    std::vector<int64_t> steps;
    for (const int64_t m : spec.milestones) steps.push_back(m * steps_per_epoch);
    main = std::make_shared<optim::MultiStepLR>(opt, optim::MultiStepLROptions{.milestones = steps, .gamma = spec.gamma});
  } else if (spec.kind == "exponential") {
    main = std::make_shared<optim::StepLR>(opt, optim::StepLROptions{.step_size = steps_per_epoch, .gamma = spec.gamma});
  } else if (warmup == 0) {
    return nullptr;  // constant lr
  } else {
    main = std::make_shared<optim::StepLR>(opt, optim::StepLROptions{.step_size = total + 1, .gamma = 1.0});
  }
  if (warmup == 0) return main;
  auto linear = std::make_shared<optim::LinearLR>(opt, optim::LinearLROptions{.start_factor = 0.01, .total_iters = warmup});
  return std::make_shared<optim::SequentialLR>(opt, std::vector<std::shared_ptr<optim::LRScheduler>>{linear, main},
                                               std::vector<int64_t>{warmup});
}

std::unique_ptr<optim::ReduceLROnPlateau> make_plateau(const TrainConfig& c, optim::Optimizer& opt) {
  if (parse_scheduler(c.scheduler).kind != "plateau") return nullptr;
  const bool accuracy = c.plateau_metric.ends_with("_acc");
  return std::make_unique<optim::ReduceLROnPlateau>(
      opt, optim::ReduceLROnPlateauOptions{.mode = accuracy ? optim::PlateauMode::max : optim::PlateauMode::min,
                                           .factor = c.plateau_factor, .patience = c.plateau_patience});
}

json config_json(const TrainConfig& c, const DataInfo& d, int64_t steps_per_epoch) {
  return json{{"event", "config"},
              {"data", c.data},
              {"data_dir", d.dir},
              {"model", c.model},
              {"epochs", c.epochs},
              {"batch_size", c.batch_size},
              {"accum_steps", c.accum_steps},
              {"lr", c.lr},
              {"optimizer", c.optimizer},
              {"momentum", c.momentum},
              {"weight_decay", c.weight_decay},
              {"scheduler", c.scheduler},
              {"warmup_epochs", c.warmup_epochs},
              {"plateau", c.scheduler == "plateau" ? json{{"patience", c.plateau_patience}, {"factor", c.plateau_factor},
                                                          {"metric", c.plateau_metric}} : json()},
              {"early_stop", c.early_stop_patience > 0 ? json{{"patience", c.early_stop_patience},
                                                              {"metric", c.early_stop_metric}} : json()},
              {"label_smoothing", c.label_smoothing},
              {"clip_grad_norm", c.clip_grad_norm},
              {"amp", c.amp},
              {"channels_last", c.channels_last},
              {"augment", c.augment},
              {"augment_policy", c.augment ? c.augment_policy : "none"},
              {"random_erasing", c.random_erasing},
              {"mixup", c.mixup},
              {"cutmix", c.cutmix},
              {"shuffle", c.shuffle},
              {"seed", c.seed},
              {"device", resolve_device(c.device).str()},
              {"threads", get_num_threads()},
              {"world_size", c.world_size},
              {"sync_bn", c.sync_bn},
              {"cuda_graphs", c.cuda_graphs},
              {"workers", c.workers},
              {"save", c.save_dir},
              {"resume", c.resume_dir},
              {"eval_every", c.eval_every},
              {"eval_limit", c.eval_limit},
              {"init_weights", c.init_weights},
              {"finetune", c.finetune},
              {"freeze_backbone", c.freeze_backbone},
              {"backbone_lr_scale", c.backbone_lr_scale},
              {"save_weights", c.save_weights},
              {"max_steps", c.max_steps},
              {"train_size", d.train->size()},
              {"test_size", d.test->size()},
              {"classes", d.classes},
              {"steps_per_epoch", steps_per_epoch},
              {"step_event_every", c.log_every},
              {"normalize", {{"mean", d.mean}, {"std", d.std}}},
              {"image_size", d.image_size},
              {"eval_resize", d.resize},
              {"cache", c.cache_dir},
              {"overwrite", c.overwrite},
              {"skip_bad_images", c.skip_bad_images}};
}

}  // namespace ember::train
