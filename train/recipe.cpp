// The default recipe and the validation of a TrainConfig.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "gpu_model.h"
#include "../core/error.h"
#include "../models/zoo.h"
#include "config.h"
#include "trainer.h"

namespace ember::train {

namespace {
bool was_set(const TrainConfig& c, const std::string& name) {
  return std::find(c.explicitly_set.begin(), c.explicitly_set.end(), name) != c.explicitly_set.end();
}

// The value as the user typed it where we have that text ("1e400"), else as a number.
template <typename T>
std::string got(const TrainConfig& c, const std::string& name, T value) {
  auto it = c.given_text.find(name);
  if (it != c.given_text.end()) return it->second;
  std::ostringstream os;
  os << value;
  return os.str();
}
}  // namespace

ScheduleSpec parse_scheduler(const std::string& text) {
  ScheduleSpec s;
  const size_t colon = text.find(':');
  s.kind = text.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool takes_arg = s.kind == "multistep" || s.kind == "exponential";
  EMBER_CHECK(s.kind == "none" || s.kind == "step" || s.kind == "cosine" || s.kind == "onecycle" ||
                  s.kind == "plateau" || takes_arg,
              "--scheduler must be none, step, cosine, onecycle, multistep:M1,M2,..., exponential:G or plateau, got '",
              text, "'");
  EMBER_CHECK(takes_arg == (colon != std::string::npos), "--scheduler ", s.kind, takes_arg ? " needs its value after "
              "a colon (multistep:30,60 or exponential:0.97)" : " takes no value", ", got '", text, "'");
  if (s.kind == "exponential") {
    const char* end = arg.data() + arg.size();
    auto [ptr, ec] = std::from_chars(arg.data(), end, s.gamma);
    EMBER_CHECK(ec == std::errc() && ptr == end && s.gamma > 0 && s.gamma <= 1, "--scheduler exponential:G multiplies "
                "the lr by G after every epoch, G in (0, 1]; got '", text, "'");
  } else if (s.kind == "multistep") {
    s.gamma = 0.1;
    std::istringstream in(arg);
    for (std::string item; std::getline(in, item, ',');) {
      int64_t m = 0;
      const char* end = item.data() + item.size();
      auto [ptr, ec] = std::from_chars(item.data(), end, m);
      EMBER_CHECK(ec == std::errc() && ptr == end && m >= 1 && (s.milestones.empty() || m > s.milestones.back()),
                  "--scheduler multistep:M1,M2,... takes epochs (whole numbers >= 1, increasing) at which the lr is "
                  "multiplied by 0.1; got '", item, "' in '", text, "'");
      s.milestones.push_back(m);
    }
    EMBER_CHECK(!s.milestones.empty() && arg.back() != ',', "--scheduler multistep:M1,M2,... needs at least one "
                "epoch and no empty item, got '", text, "'");
  }
  return s;
}

void resolve_monitored(TrainConfig& c, bool held_out) {
  const std::string set = held_out ? "val" : "test";
  const std::string where = held_out ? "a held-out validation set (val_loss, val_acc)"
                                     : "the test set, with no held-out split (test_loss, test_acc)";
  for (auto [option, metric] : {std::pair<const char*, std::string*>{"plateau-metric", &c.plateau_metric},
                                {"early-stop-metric", &c.early_stop_metric}}) {
    if (metric->empty()) *metric = set + "_loss";
    EMBER_CHECK(*metric == set + "_loss" || *metric == set + "_acc", "--", option, " ", *metric, ": this run does "
                "not produce it; it evaluates on ", where, " (data '", c.data, "')");
  }
}

std::vector<std::string> resolve(TrainConfig& c) {
  // The default recipe (Fashion-MNIST, 2 CPU cores, a few minutes): the `cnn` model, AdamW with
  // a one-cycle schedule, light augmentation (random 2-pixel shifts; mirror images for
  // Fashion-MNIST only — mirrored digits are other digits) and label smoothing. Any value the
  // user gave is kept; the rest (fields left at -1 and not in explicitly_set) come from the
  // recipe. A value the user gave is never replaced, even a negative one: validate() rejects it.
  std::vector<std::string> chose;
  auto unset = [&](double v, const char* name) { return v == -1 && !was_set(c, name); };
  const bool recipe = c.optimizer.empty();  // nothing recipe-related given: the tuned defaults
  if (c.model.empty()) {
    c.model = "cnn";
    chose.push_back("model cnn");
  }
  if (c.optimizer.empty()) {
    c.optimizer = "adamw";
    chose.push_back("optimizer adamw");
  }
  if (unset(c.epochs, "epochs")) {
    c.epochs = 10;
    chose.push_back("epochs 10");
  }
  if (unset(static_cast<double>(c.batch_size), "batch-size")) {
    c.batch_size = recipe ? 128 : 64;
    chose.push_back("batch size " + std::to_string(c.batch_size));
  }
  if (unset(c.lr, "lr")) {
    c.lr = recipe ? 3e-3 : (c.optimizer == "sgd" ? 0.05 : 1e-3);
    chose.push_back("lr " + std::to_string(c.lr));
  }
  if (unset(c.weight_decay, "weight-decay")) {
    c.weight_decay = c.optimizer == "adamw" ? (recipe ? 5e-4 : 1e-2) : (c.optimizer == "sgd" ? 5e-4 : 0.0);
    chose.push_back("weight decay " + std::to_string(c.weight_decay));
  }
  if (c.scheduler.empty()) {
    c.scheduler = recipe ? "onecycle" : "none";
    chose.push_back("scheduler " + c.scheduler);
  }
  if (unset(c.warmup_epochs, "warmup-epochs")) c.warmup_epochs = 0;
  if (unset(c.label_smoothing, "label-smoothing")) {
    c.label_smoothing = recipe ? 0.1 : 0.0;
    if (recipe) chose.push_back("label smoothing 0.1");
  }
  return chose;
}

void check_options(const TrainConfig& c) {
  // A field is checked when the user gave it, or when it is not at its "not given" value (-1).
  auto given = [&](const char* name, double v) { return was_set(c, name) || v != -1; };
  auto finite = [](double v) { return std::isfinite(v); };
  if (given("epochs", c.epochs))
    EMBER_CHECK(c.epochs >= 1, "--epochs must be at least 1, got ", got(c, "epochs", c.epochs));
  if (given("batch-size", static_cast<double>(c.batch_size)))
    EMBER_CHECK(c.batch_size >= 1, "--batch-size must be at least 1, got ", got(c, "batch-size", c.batch_size));
  EMBER_CHECK(c.accum_steps >= 1, "--accum-steps must be at least 1 (the batches whose gradients each optimizer "
              "step accumulates), got ", got(c, "accum-steps", c.accum_steps));
  EMBER_CHECK(c.plateau_patience >= 0, "--plateau-patience must be 0 or more (evaluations without improvement "
              "before the lr is lowered), got ", got(c, "plateau-patience", c.plateau_patience));
  EMBER_CHECK(finite(c.plateau_factor) && c.plateau_factor > 0 && c.plateau_factor < 1, "--plateau-factor must be in "
              "(0, 1) (the lr is multiplied by it), got ", got(c, "plateau-factor", c.plateau_factor));
  EMBER_CHECK(c.early_stop_patience >= 0 && (c.early_stop_patience > 0 || !was_set(c, "early-stop-patience")),
              "--early-stop-patience must be at least 1 (evaluations without improvement before the run stops), got ",
              got(c, "early-stop-patience", c.early_stop_patience));
  for (const auto& [name, metric] : {std::pair<const char*, std::string>{"plateau-metric", c.plateau_metric},
                                     {"early-stop-metric", c.early_stop_metric}})
    EMBER_CHECK(metric.empty() || metric == "test_acc" || metric == "test_loss" || metric == "val_acc" ||
                    metric == "val_loss",
                "--", name, " must be test_acc, test_loss, val_acc or val_loss, got '", metric, "'");
  if (given("lr", c.lr))
    EMBER_CHECK(finite(c.lr) && c.lr > 0, "--lr must be a positive finite number, got ", got(c, "lr", c.lr));
  if (given("weight-decay", c.weight_decay))
    EMBER_CHECK(finite(c.weight_decay) && c.weight_decay >= 0, "--weight-decay must be a finite number >= 0, got ",
                got(c, "weight-decay", c.weight_decay));
  if (given("warmup-epochs", c.warmup_epochs))
    EMBER_CHECK(finite(c.warmup_epochs) && c.warmup_epochs >= 0, "--warmup-epochs must be a finite number >= 0, got ",
                got(c, "warmup-epochs", c.warmup_epochs));
  if (given("label-smoothing", c.label_smoothing))
    EMBER_CHECK(c.label_smoothing >= 0 && c.label_smoothing < 1, "--label-smoothing must be in [0, 1), got ",
                got(c, "label-smoothing", c.label_smoothing));
  EMBER_CHECK(c.momentum >= 0 && c.momentum < 1, "--momentum must be in [0, 1), got ", got(c, "momentum", c.momentum));
  EMBER_CHECK(finite(c.clip_grad_norm) && c.clip_grad_norm >= 0 && (c.clip_grad_norm > 0 || !was_set(c, "clip-grad-norm")),
              "--clip-grad-norm must be a positive finite number, got ", got(c, "clip-grad-norm", c.clip_grad_norm));
  if (given("val-split", c.val_split))
    EMBER_CHECK(c.val_split > 0 && c.val_split < 1, "--val-split must be in (0, 1), got ",
                got(c, "val-split", c.val_split));
  if (given("image-size", static_cast<double>(c.image_size)))
    EMBER_CHECK(c.image_size >= 8, "--image-size must be at least 8, got ", got(c, "image-size", c.image_size));
  EMBER_CHECK(c.eval_every >= 1, "--eval-every must be at least 1, got ", got(c, "eval-every", c.eval_every));
  EMBER_CHECK(c.eval_limit >= 0, "--eval-limit must be 0 (all) or a positive count, got ",
              got(c, "eval-limit", c.eval_limit));
  if (given("max-steps", static_cast<double>(c.max_steps)))
    EMBER_CHECK(c.max_steps >= 1, "--max-steps must be at least 1, got ", got(c, "max-steps", c.max_steps));
  // Unsigned: the parser would read "-1" as 2^64 - 1.
  if (auto it = c.given_text.find("seed"); it != c.given_text.end())
    EMBER_CHECK(it->second.empty() || it->second[0] != '-', "--seed must be a non-negative integer, got ", it->second);
  EMBER_CHECK(c.threads >= 0, "--threads must be 0 (all cores) or a positive count, got ", got(c, "threads", c.threads));
  EMBER_CHECK(c.amp == "off" || c.amp == "bf16" || c.amp == "fp16", "--amp must be bf16 or fp16 (or off, the ",
              "default), got '", c.amp, "'");
  EMBER_CHECK(c.augment_policy == "light" || c.augment_policy == "trivial" || c.augment_policy == "randaug",
              "--augment must be light, trivial or randaug, got '", c.augment_policy, "'");
  for (const auto& [name, alpha] : {std::pair<const char*, double>{"mixup", c.mixup}, {"cutmix", c.cutmix}})
    EMBER_CHECK(finite(alpha) && alpha >= 0 && (alpha > 0 || !was_set(c, name)), "--", name,
                " is the alpha of Beta(alpha, alpha) and must be a positive finite number, got ", got(c, name, alpha));
  EMBER_CHECK(finite(c.random_erasing) && c.random_erasing >= 0 && c.random_erasing <= 1,
              "--random-erasing is a probability and must be in [0, 1], got ", got(c, "random-erasing", c.random_erasing));
  if (!c.augment)
    for (const char* name : {"augment", "mixup", "cutmix", "random-erasing"})
      EMBER_CHECK(!was_set(c, name), "--no-augment turns augmentation off, and --", name, " asks for it; give one of "
                  "the two");
  EMBER_CHECK(c.workers >= 0, "--workers must be non-negative, got ", got(c, "workers", c.workers));
  // Note [Data on the device] in data/loader.h: a fused crop/flip/normalize on in-memory images.
  if (c.data_on_device) {
    EMBER_CHECK(c.device.rfind("cuda", 0) == 0 || c.device == "auto", "--data-on-device keeps the training set in a "
                "CUDA device's memory and needs --device cuda, got --device ", c.device);
    EMBER_CHECK(c.augment_policy == "light" && c.random_erasing == 0 && c.mixup == 0 && c.cutmix == 0,
                "--data-on-device makes batches with the light augmentation (crops and flips) on the device; --augment "
                "trivial|randaug, --random-erasing, --mixup and --cutmix run on the host");
  }
  EMBER_CHECK(c.log_every >= 1, "--log-every must be at least 1, got ", got(c, "log-every", c.log_every));
  // Options that only mean something for ImageFolder data: the named datasets are IDX files (a
  // directory is checked once it is opened: start_run).
  if (c.data == "fashion-mnist" || c.data == "mnist")
    for (const char* name : {"val", "val-split", "image-size", "cache", "skip-bad-images"})
      EMBER_CHECK(!was_set(c, name), "--", name, " applies to ImageFolder data only, and --data ", c.data,
                  " is IDX data (docs/data.md)");
  EMBER_CHECK(!was_set(c, "data-dir") || c.data == "fashion-mnist" || c.data == "mnist", "--data-dir applies to "
              "--data fashion-mnist or mnist; --data '", c.data, "' names the directory itself");
  // Fine-tuning (Note [Fine-tuning] in train/finetune.h); a resumed run has its weights already.
  EMBER_CHECK(!c.finetune || !c.init_weights.empty() || !c.resume_dir.empty(),
              "--finetune needs --init-weights (the PyTorch weights to start from)");
  EMBER_CHECK(c.finetune || (!c.freeze_backbone && !was_set(c, "backbone-lr-scale")), "--",
              c.freeze_backbone ? "freeze-backbone" : "backbone-lr-scale", " applies to --finetune only");
  EMBER_CHECK(finite(c.backbone_lr_scale) && c.backbone_lr_scale > 0,
              "--backbone-lr-scale must be a positive finite number, got ", got(c, "backbone-lr-scale", c.backbone_lr_scale));
  EMBER_CHECK(!c.freeze_backbone || !was_set(c, "backbone-lr-scale"), "--freeze-backbone and --backbone-lr-scale "
              "cannot be combined: a frozen backbone does not train at any learning rate");
  // --resume continues a run: its weights come from the checkpoint.
  EMBER_CHECK(c.resume_dir.empty() || c.init_weights.empty(), "--init-weights cannot be used with --resume (the run "
              "continues from the weights in '", c.resume_dir, "')");
}

void validate(const TrainConfig& c) {
  check_options(c);
  EMBER_CHECK(c.warmup_epochs < c.epochs, "--warmup-epochs must be less than --epochs (", c.epochs, "), got ",
              got(c, "warmup-epochs", c.warmup_epochs));
  EMBER_CHECK(c.optimizer == "adam" || c.optimizer == "adamw" || c.optimizer == "sgd", "--optimizer must be adam, "
              "adamw or sgd, got '", c.optimizer, "'");
  const ScheduleSpec schedule = parse_scheduler(c.scheduler);
  EMBER_CHECK(schedule.kind != "plateau" || c.warmup_epochs == 0, "--warmup-epochs cannot be combined with --scheduler "
              "plateau: the plateau schedule lowers the lr that an evaluation finds, and a warmup sets it every step");
  for (const char* name : {"plateau-patience", "plateau-factor", "plateau-metric"})
    EMBER_CHECK(schedule.kind == "plateau" || !was_set(c, name), "--", name, " applies to --scheduler plateau only");
  EMBER_CHECK(c.early_stop_patience > 0 || !was_set(c, "early-stop-metric"), "--early-stop-metric applies with "
              "--early-stop-patience only");
  // Mixup and CutMix mix each image with another of its batch.
  EMBER_CHECK((c.mixup == 0 && c.cutmix == 0) || c.batch_size >= 2, "--", c.mixup > 0 ? "mixup" : "cutmix",
              " mixes each image with another image of its batch and needs --batch-size 2 or more, got ",
              c.batch_size);
  // What a captured step cannot contain (Note [Training with CUDA graphs] in train/graph_step.h).
  EMBER_CHECK(!c.cuda_graphs || (!c.profile && c.profile_trace.empty()), "--cuda-graphs cannot be combined with "
              "--profile or --profile-trace: the profiler times each op as it runs, and a graph replays them all "
              "in one launch");
  EMBER_CHECK(!c.cuda_graphs || c.accum_steps == 1, "--cuda-graphs cannot be combined with --accum-steps ",
              c.accum_steps, ": a captured step is one batch; accumulate without --cuda-graphs, or give --batch-size ",
              c.batch_size * c.accum_steps, " with --cuda-graphs if it fits in memory");
  if (!c.explain.empty()) {
    (void)gpu_spec(c.explain);  // names the GPUs the step model knows
    EMBER_CHECK(c.save_dir.empty() && c.resume_dir.empty() && c.metrics_path.empty() && !c.profile &&
                    c.profile_trace.empty(),
                "--explain records one step and trains nothing: it takes no --save, --resume, --metrics, --profile "
                "or --profile-trace");
  }
  models::check_model_name(c.model);
}

}  // namespace ember::train
