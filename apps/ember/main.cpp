// The ember command: train, evaluate and run image classifiers.
//
//   ember train [--model cnn --epochs 2 ...]   train on Fashion-MNIST (the default) or MNIST
//   ember eval CHECKPOINT [--data ...]         accuracy, per-class accuracy, confusion matrix
//   ember predict CHECKPOINT IMAGE...          top-5 classes for image files (or IDX FILE:INDEX samples)
//   ember export CHECKPOINT model.onnx         the network as ONNX, with its preprocessing and classes
//   ember report RUN_DIR... [--out FILE]       a run's report.html (several runs: curves overlaid)
//   ember inspect PATH [--json]                an ImageFolder tree: classes, counts, sizes, bad files
//   ember bench loader --root PATH ...         data-loader throughput (one JSON line)
//   ember info [--json]                        version, build, CPU features, GEMM kernels, devices
//   ember --version
//   mpirun -np 2 ember train ...               data-parallel training (docs/distributed.md)
//
// Every error is one line on stderr and a non-zero exit; nothing is left half-written.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ember/ember.h>
#include <ember/io/atomic_file.h>
#include <ember/parallel/communicator.h>
#include <ember/train/checkpoint.h>
#include <ember/train/config.h>
#include <ember/train/data_setup.h>
#include <ember/train/inference.h>
#include <ember/train/trainer.h>
#include <ember/train/run_report.h>
#include <ember/train/terminal_text.h>

#include "augment_command.h"
#include "data_commands.h"
#include "export_command.h"
#include "info_command.h"
#include "explain_command.h"
#include "lab_command.h"
#include "option_values.h"
#include "predict_command.h"

using namespace ember;

namespace {

// "simple_cnn | cnn | resnet18 | ...": the zoo's names for --model's help.
std::string model_choices() {
  std::string s;
  for (const std::string& n : models::model_names()) s += (s.empty() ? "" : " | ") + n;
  return s;
}

void add_train_options(CLI::App& app, train::TrainConfig& c) {
  app.add_option("--data", c.data,
                 "fashion-mnist | mnist | a directory: an ImageFolder tree (class subdirectories of images), "
                 "MNIST-style IDX files or CIFAR-10/100 binary batches")
      ->capture_default_str();
  app.add_option("--val", c.val, "ImageFolder validation tree (same classes as --data)");
  app.add_option("--val-split", c.val_split, "ImageFolder: fraction held out for validation, stratified and seeded "
                 "(default 0.1 without --val)");
  app.add_option("--image-size", c.image_size, "ImageFolder: crop size N (eval Resize(N*256/224) + CenterCrop(N); "
                 "default 224)");
  app.add_option("--cache", c.cache_dir, "ImageFolder: decode and resize once into a cache file in this directory");
  app.add_flag("--skip-bad-images", c.skip_bad_images, "ImageFolder: leave unreadable files out (reported each epoch)");
  app.add_option("--data-dir", c.data_dir, "where the dataset files are (default: Debian's dataset package)");
  app.add_option("--model", c.model, model_choices());
  app.add_option("--epochs", c.epochs, "number of epochs");
  app.add_option("--batch-size", c.batch_size, "images per step (per process under mpirun/srun)");
  app.add_option("--accum-steps", c.accum_steps, "accumulate the gradients of K batches per optimizer step (the "
                 "step's batch is K * --batch-size)")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (the peak lr for onecycle)");
  app.add_option("--optimizer", c.optimizer, "adam | adamw | sgd");
  app.add_option("--momentum", c.momentum, "SGD momentum (Nesterov when > 0)")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay (decoupled for adamw)");
  app.add_option("--scheduler", c.scheduler, "none | step | cosine | onecycle | multistep:M1,M2,... (lr x0.1 at those "
                 "epochs) | exponential:G (lr xG every epoch) | plateau (lr x--plateau-factor when an evaluation "
                 "metric stops improving)");
  app.add_option("--plateau-patience", c.plateau_patience, "plateau: evaluations without improvement before the lr is "
                 "lowered")->capture_default_str();
  app.add_option("--plateau-factor", c.plateau_factor, "plateau: the lr is multiplied by this")->capture_default_str();
  app.add_option("--plateau-metric", c.plateau_metric, "plateau: test_loss | test_acc | val_loss | val_acc (default: "
                 "the evaluation's loss)");
  app.add_option("--early-stop-patience", c.early_stop_patience, "stop after P evaluations without improvement of "
                 "--early-stop-metric (0: never)")->capture_default_str();
  app.add_option("--early-stop-metric", c.early_stop_metric, "test_loss | test_acc | val_loss | val_acc (default: the "
                 "evaluation's loss; val_* with a held-out split)");
  app.add_option("--warmup-epochs", c.warmup_epochs, "linear warmup length in epochs (may be fractional)");
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing in [0, 1)");
  app.add_option("--seed", c.seed, "seed for initialization, shuffling, augmentation and dropout")->capture_default_str();
  app.add_option("--device", c.device, "auto | cpu | cuda[:n]")->capture_default_str();
  app.add_flag("--data-on-device", c.data_on_device, "with --device cuda: the training set in device memory once, "
               "batches cropped, flipped and normalized there (Fashion-MNIST, MNIST, CIFAR-10)");
  app.add_flag("--cuda-graphs", c.cuda_graphs, "capture each full batch's training step once as a CUDA graph and "
               "replay it (a CUDA device; the same weights as without)");
  app.add_option("--threads", c.threads, "CPU threads (0: all cores, shared among the processes of a node)")
      ->capture_default_str();
  app.add_option("--workers", c.workers, "data-loader worker threads (0: load in the training thread)")
      ->capture_default_str();
  app.add_option("--save", c.save_dir, "checkpoint directory (a checkpoint every epoch; docs/training.md)");
  app.add_option("--resume", c.resume_dir, "continue the run saved in this checkpoint directory (and keep saving there)");
  app.add_flag("--overwrite", c.overwrite, "--save into a directory that holds another run's checkpoint, replacing it");
  app.add_option("--clip-grad-norm", c.clip_grad_norm, "scale the gradients to this total norm at most before each step");
  app.add_option("--amp", c.amp, "mixed precision: bf16 | fp16 (with loss scaling) | off (docs/amp.md)")
      ->capture_default_str();
  app.add_flag("--channels-last", c.channels_last, "the model's conv weights and the images in the channels-last "
               "(NHWC) memory format, as PyTorch's model.to(memory_format=torch.channels_last) (docs/amp.md)");
  app.add_option("--eval-every", c.eval_every, "evaluate on the test set every N epochs")->capture_default_str();
  app.add_option("--eval-limit", c.eval_limit, "evaluate on the first N test images only (0: all)")
      ->capture_default_str();
  app.add_option("--init-weights", c.init_weights, "start from these weights (.safetensors, PyTorch names)");
  app.add_flag("--finetune", c.finetune, "--init-weights holds PyTorch weights (a torchvision state_dict): load all "
               "but the classifier, which is made new for the dataset's classes");
  app.add_flag("--freeze-backbone", c.freeze_backbone, "--finetune: train the classifier only (the backbone's "
               "weights and BatchNorm statistics stay as loaded)");
  app.add_option("--backbone-lr-scale", c.backbone_lr_scale, "--finetune: the backbone trains with lr times this")
      ->capture_default_str();
  app.add_option("--save-weights", c.save_weights, "write the final weights here (.safetensors)");
  app.add_flag("--profile", c.profile, "print every op's time (forward, backward, optimizer, data) at the end");
  app.add_option("--profile-trace", c.profile_trace, "write a Chrome/Perfetto trace (open in ui.perfetto.dev)");
  app.add_option("--max-steps", c.max_steps, "stop after N optimizer steps in total");
  app.add_flag("--no-shuffle", [&c](int64_t) { c.shuffle = false; }, "keep the dataset's order");
  app.add_flag("--no-augment", [&c](int64_t) { c.augment = false; }, "no random crops or flips");
  app.add_option("--augment", c.augment_policy, "light (random crops and flips) | trivial (then TrivialAugmentWide) | "
                 "randaug (then RandAugment(2, 9))")->capture_default_str();
  app.add_option("--random-erasing", c.random_erasing, "RandomErasing after Normalize with this probability (0: off)");
  app.add_option("--mixup", c.mixup, "Mixup with lambda ~ Beta(A, A), A > 0 (soft targets; off when not given)");
  app.add_option("--cutmix", c.cutmix, "CutMix with lambda ~ Beta(A, A), A > 0; with --mixup, one of the two per batch");
  app.add_option("--metrics", c.metrics_path, "write JSON-lines metrics here (docs/metrics.md)");
  app.add_option("--log-every", c.log_every, "metrics step events every N steps")->capture_default_str();
  app.add_flag("--sync-bn", c.sync_bn,
               "under mpirun/srun: BatchNorm statistics over every process's batch "
               "(SyncBatchNorm); no effect on one process");
  app.add_flag("--quiet", c.quiet, "no progress output");
  app.add_option("--explain", c.explain, "h100 | h200: record one step of the first batch on the CUDA device, print "
                 "its launches, bytes and predicted time on that GPU (docs/cuda.md), and stop without training");

  // The help's sections; CLI11 lists a section where its first option was added.
  const std::pair<const char*, std::vector<const char*>> sections[] = {
      {"Data", {"--data", "--val", "--val-split", "--image-size", "--cache", "--skip-bad-images", "--data-dir",
                "--no-shuffle", "--no-augment", "--augment", "--random-erasing", "--mixup", "--cutmix", "--workers"}},
      {"Model and optimization", {"--model", "--epochs", "--batch-size", "--accum-steps", "--lr", "--optimizer", "--momentum",
                                  "--weight-decay", "--scheduler", "--warmup-epochs", "--plateau-patience",
                                  "--plateau-factor", "--plateau-metric", "--label-smoothing", "--clip-grad-norm",
                                  "--seed", "--max-steps", "--early-stop-patience", "--early-stop-metric"}},
      {"Devices and threads", {"--device", "--data-on-device", "--cuda-graphs", "--threads", "--amp", "--channels-last"}},
      {"Checkpoints and weights", {"--save", "--resume", "--overwrite", "--init-weights", "--finetune", "--freeze-backbone",
                                   "--backbone-lr-scale", "--save-weights"}},
      {"Evaluation and output", {"--eval-every", "--eval-limit", "--metrics", "--log-every", "--quiet", "--profile",
                                 "--profile-trace", "--explain"}},
      {"Distributed (mpirun / srun)", {"--sync-bn"}},
  };
  for (const auto& [section, names] : sections)
    for (const char* name : names) app.get_option(name)->group(section);
}

void print_eval(const train::LoadedModel& m, const train::EvalResult& r) {
  std::printf("accuracy %.2f%% (%lld images), loss %.4f\n", 100 * r.accuracy, static_cast<long long>(r.count), r.loss);
  std::printf("per-class accuracy:\n");
  for (size_t c = 0; c < m.classes.size(); ++c) std::printf("  %-14s %6.2f%%\n", train::printable(m.classes[c]).c_str(), 100 * r.per_class_accuracy[c]);
  std::printf("confusion matrix (rows: true class, columns: predicted):\n      ");
  for (size_t c = 0; c < m.classes.size(); ++c) std::printf("%6zu", c);
  std::printf("\n");
  for (size_t t = 0; t < m.classes.size(); ++t) {
    std::printf("  %3zu ", t);
    for (size_t p = 0; p < m.classes.size(); ++p) std::printf("%6lld", static_cast<long long>(r.confusion[t][p]));
    std::printf("\n");
  }
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

int fail(const std::string& message) {
  // Messages quote file and class names: control bytes are escaped (Note [Printing untrusted names]).
  std::fprintf(stderr, "ember: error: %s\n", train::printable(message, train::Newlines::keep).c_str());
  return 1;
}


// ---- the subcommands ---------------------------------------------------------------------------
// Each subcommand is declared by one function: its options, parsed into state the command's
// action holds, and the action, which returns the exit status. main() parses and runs the one given.

struct Command {
  CLI::App* cli;
  std::function<int()> run;
};

Command train_command(CLI::App& app) {
  auto cfg = std::make_shared<train::TrainConfig>();
  CLI::App* cmd = app.add_subcommand("train", "train a classifier (default: Fashion-MNIST, the default recipe)");
  add_train_options(*cmd, *cfg);
  return {cmd, [cfg, cmd] {
            // The options given, by long name without "--", and their text as typed (for messages).
            for (const CLI::Option* o : cmd->get_options()) {
              if (o->count() == 0 || o->get_lnames().empty()) continue;
              cfg->explicitly_set.push_back(o->get_lnames().front());
              if (!o->results().empty()) cfg->given_text[o->get_lnames().front()] = o->results().back();
            }
            train::check_options(*cfg);  // every value in its range before anything is read or written
            return train::run_training(*cfg).interrupted ? 130 : 0;
          }};
}

Command explain_command(CLI::App& app) {
  auto o = std::make_shared<app::ExplainCli>();
  o->cfg.model = "resnet18";
  o->cfg.batch_size = 256;
  o->cfg.image_size = 224;
  o->cfg.device = "cuda";
  CLI::App* cmd = app.add_subcommand("explain", "one training step's GPU launches, bytes and FLOPs, and its time "
                                     "predicted on an H100 or H200 (on the emulator: without running a kernel)");
  cmd->add_option("--model", o->cfg.model, model_choices())
      ->capture_default_str();
  cmd->add_option("--batch-size", o->cfg.batch_size, "images per step")->capture_default_str();
  cmd->add_option("--image-size", o->cfg.image_size, "input images of N x N pixels")->capture_default_str();
  cmd->add_option("--channels", o->channels, "input channels")->capture_default_str();
  cmd->add_option("--classes", o->classes, "classes of the classifier")->capture_default_str();
  cmd->add_option("--optimizer", o->cfg.optimizer, "adam | adamw | sgd (default: the recipe's)");
  cmd->add_option("--amp", o->cfg.amp, "off | bf16 | fp16")->capture_default_str();
  cmd->add_flag("--channels-last", o->cfg.channels_last, "NHWC activations and weights");
  cmd->add_flag("--cuda-graphs", o->cfg.cuda_graphs, "price the step as a replayed CUDA graph");
  cmd->add_option("--clip-grad-norm", o->cfg.clip_grad_norm, "gradient clipping at this norm (0: off)");
  cmd->add_option("--device", o->cfg.device, "the CUDA device to record on")->capture_default_str();
  cmd->add_option("--gpu", o->options.gpu, "h100 | h200: the GPU to predict for")->capture_default_str();
  cmd->add_option("--world-size", o->options.world_sizes,
                  "data-parallel GPUs to predict the scaling for (repeatable; e.g. --world-size 2 8 64)");
  cmd->add_option("--calibration", o->options.calibration, "a GPU calibration file (default: calibration/gpu.json, "
                  "compiled in)");
  cmd->add_option("--rows", o->options.rows, "table rows (largest first; -1: all)")->capture_default_str();
  cmd->add_flag("--json", o->options.json, "one JSON object: launches, host_syncs, bytes, flops, predicted_ms, "
                "floor_ms, ops, ...");
  return {cmd, [o] { return app::run_explain(*o); }};
}

struct EvalOptions {
  std::string checkpoint, data = "fashion-mnist", data_dir;
  int64_t batch = 256;
};

int run_eval(EvalOptions o, bool data_given) {
  EMBER_CHECK(o.batch >= 1, "--batch-size must be at least 1, got ", o.batch);
  train::LoadedModel m = train::load_model(o.checkpoint);
  // A checkpoint directory remembers its data: without --data, evaluate on that (its --val tree for
  // an ImageFolder run), not on Fashion-MNIST.
  if (!data_given && std::filesystem::is_directory(o.checkpoint) && train::has_checkpoint(o.checkpoint)) {
    const train::Manifest saved = train::open_checkpoint(o.checkpoint);
    if (!saved.data.empty()) {
      o.data = saved.val.empty() ? saved.data : saved.val;
      if (o.data_dir.empty() && saved.val.empty()) o.data_dir = saved.data_dir;
      std::fprintf(stderr, "ember eval: --data %s (the checkpoint's)\n", train::printable(o.data).c_str());
      if (!saved.split_recorded && saved.val.empty() && train::is_image_folder_dir(o.data))
        std::fprintf(stderr, "ember eval: warning: the checkpoint does not record which images its run held out "
                     "(it was written by an older ember): evaluating on the whole tree, training images "
                     "included\n");
    }
  }
  const train::EvalResult r = train::evaluate(m, o.data, o.data_dir, o.batch);
  if (r.held_out_of > 0)
    std::fprintf(stderr, "ember eval: the model's run held out %lld of the %lld images of %s (--val-split %g "
                 "--seed %llu): evaluating on those\n", static_cast<long long>(m.split->held_out),
                 static_cast<long long>(r.held_out_of), train::printable(o.data).c_str(), m.split->fraction,
                 static_cast<unsigned long long>(m.split->seed));
  print_eval(m, r);
  return 0;
}

Command eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "evaluate a checkpoint on a test set");
  cmd->add_option("checkpoint", o->checkpoint, "weights .safetensors file or checkpoint directory")->required();
  cmd->add_option("--data", o->data, "fashion-mnist | mnist | IDX directory")->capture_default_str();
  cmd->add_option("--data-dir", o->data_dir, "where the dataset files are");
  cmd->add_option("--batch-size", o->batch, "images per batch")->capture_default_str();
  return {cmd, [o, cmd] { return run_eval(*o, cmd->get_option("--data")->count() > 0); }};
}

struct PredictOptions {
  std::string checkpoint, model;
  std::vector<std::string> inputs;
  int top_k = 5;
  int64_t image_size = 224;
  bool image_size_given = false, json = false;
};

int run_predict(PredictOptions o) {
  EMBER_CHECK(o.top_k >= 1, "--top must be at least 1, got ", o.top_k);
  EMBER_CHECK(!o.model.empty() || !o.image_size_given,
              "--image-size applies with --model only (a checkpoint knows its input size)");
  train::LoadedModel m = o.model.empty() ? train::load_model(o.checkpoint)
                                         : train::load_pytorch_model(o.checkpoint, o.model, o.image_size);
  o.inputs = app::expand_image_dirs(o.inputs);
  std::vector<train::Prediction> preds = train::predict(m, o.inputs, o.top_k);
  if (o.json) {
    std::printf("%s\n", app::predictions_json(m, o.inputs, preds).c_str());
    return 0;
  }
  for (size_t i = 0; i < preds.size(); ++i) {
    std::printf("%s:", train::printable(o.inputs[i]).c_str());
    for (auto& [name, p] : preds[i].top) std::printf("  %s %.1f%%", train::printable(name).c_str(), 100 * p);
    std::printf("\n");
  }
  return 0;
}

Command predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "classify images");
  cmd->add_option("checkpoint", o->checkpoint, "weights .safetensors file or checkpoint directory")->required();
  cmd->add_option("images", o->inputs, "image files (PNG, JPEG, ...), directories of them, or FILE:INDEX "
                  "(image INDEX of an IDX file)")->required();
  cmd->add_option("--top", o->top_k, "how many classes to show")->capture_default_str();
  cmd->add_option("--model", o->model, "CHECKPOINT is PyTorch weights (a state_dict saved with safetensors) for "
                  "this zoo model, e.g. resnet50 (docs/models.md)");
  cmd->add_option("--image-size", o->image_size, "with --model: the CenterCrop size (Resize to size*256/224 "
                  "first)")->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object: every image's logits and top classes");
  return {cmd, [o, cmd] {
            o->image_size_given = cmd->get_option("--image-size")->count() > 0;
            return run_predict(*o);
          }};
}

Command export_command(CLI::App& app) {
  auto o = std::make_shared<app::ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", std::string("write a trained network as ONNX (opset 13) with its normalization and class names") +
                    (app::onnx_export_built() ? "" : " [not in this build: no ONNX support]"));
  cmd->add_option("checkpoint", o->source, "checkpoint directory (ember train --save) or weights .safetensors "
                  "file")->required();
  cmd->add_option("output", o->output, "the .onnx file to write")->required();
  cmd->add_option("--model", o->model, "CHECKPOINT is PyTorch weights (a state_dict saved with safetensors) for "
                  "this zoo model, e.g. resnet50 (docs/models.md)");
  cmd->add_option("--image-size", o->image_size, "with --model: the input size")->capture_default_str();
  return {cmd, [o, cmd] {
            o->image_size_given = cmd->get_option("--image-size")->count() > 0;
            app::run_export(*o);
            std::printf("ember export: wrote %s\n", train::printable(o->output).c_str());
            return 0;
          }};
}

Command inspect_command(CLI::App& app) {
  auto o = std::make_shared<app::InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "summarize an ImageFolder tree");
  cmd->add_option("path", o->path, "root of the tree (class subdirectories of images)")->required();
  cmd->add_flag("--json", o->json, "print {\"classes\", \"class_to_idx\", \"samples\"} as JSON only");
  cmd->add_flag("--skip-hidden", o->skip_hidden, "leave out names beginning with '.'");
  return {cmd, [o] {
            app::run_inspect(*o);
            return 0;
          }};
}

Command report_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> runs;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("report", "write a run's report.html: curves, confusion matrix, mistakes "
                                     "(several runs: their curves overlaid)");
  cmd->add_option("runs", o->runs, "run directories (ember train --save DIR)")->required();
  cmd->add_option("--out", o->out, "where to write the page (default: RUN/report.html for one run, "
                  "./report.html for several)");
  return {cmd, [o] {
            if (o->out.empty())
              o->out = o->runs.size() == 1 ? (std::filesystem::path(o->runs[0]) / train::kReportFileName).string()
                                           : std::string(train::kReportFileName);
            train::write_run_report(o->runs, o->out);
            std::printf("ember report: wrote %s\n", train::printable(o->out).c_str());
            return 0;
          }};
}

Command info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "what runs here: version, build, CPU features, GEMM kernels, devices");
  cmd->add_flag("--json", *json, "one JSON object");
  return {cmd, [json] {
            app::run_info(*json);
            return 0;
          }};
}

Command bench_loader_command(CLI::App& app) {
  auto o = std::make_shared<app::BenchLoaderOptions>();
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand("loader", "ImageFolder data-loader throughput (JSON line)");
  cmd->add_option("--root", o->root, "ImageFolder tree")->required();
  cmd->add_option("--batch-size", o->batch_size, "images per batch")->capture_default_str();
  cmd->add_option("--workers", o->workers, "loader worker threads")->capture_default_str();
  cmd->add_option("--resize", o->resize, "Resize (shorter side)")->capture_default_str();
  cmd->add_option("--crop", o->crop, "CenterCrop size")->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "passes over the tree")->capture_default_str();
  cmd->add_flag("--cache", o->cache, "read through the decoded cache (built on the first run)");
  cmd->add_option("--cache-dir", o->cache_dir, "cache directory (default: a temp directory)");
  cmd->add_option("--threads", o->threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_flag("!--no-draft", o->draft, "decode JPEGs at full size (no DCT-domain downscaling)");
  return {cmd, [o] {
            if (o->cache && o->cache_dir.empty())
              o->cache_dir = (std::filesystem::temp_directory_path() / "ember-bench-loader-cache").string();
            app::run_bench_loader(*o);
            return 0;
          }};
}

std::vector<Command> lab_commands(CLI::App& app) {
  auto o = std::make_shared<app::LabOptions>();
  CLI::App* lab = app.add_subcommand("lab", "the kernel labs: versions of CUDA kernels with the emulator's "
                                     "counters (docs/labs.md)");
  lab->require_subcommand(1);
  CLI::App* list = lab->add_subcommand("list", "every lab and its versions");
  CLI::App* run = lab->add_subcommand("run", "run a lab's versions and print its table");
  run->add_option("lab", o->lab, "the lab (ember lab list)")->required();
  run->add_option("--version", o->version, "run this version only (an exercise too)");
  run->add_option("--size", o->size, "the problem size, A,B,... (the lab's README says what each is)");
  run->add_flag("--broken", o->broken, "run the exercise (the version with a planted bug) too");
  run->add_flag("--json", o->json, "one JSON line per version");
  return {{list,
           [] {
             app::run_lab_list();
             return 0;
           }},
          {run, [o, run] {
             EMBER_CHECK(o->version >= 0 || run->get_option("--version")->count() == 0,
                         "--version must be a version number (ember lab list), got ", o->version);
             return app::run_lab(*o);
           }}};
}

// Not in --help: a tool for the torchvision comparison test (apps/ember/augment_command.h).
Command augment_command(CLI::App& app) {
  auto a = std::make_shared<app::AugmentOpOptions>();
  CLI::App* cmd = app.add_subcommand("augment-op", "apply one augmentation op, print bins or draws");
  cmd->group("");
  cmd->add_option("--op", a->ops, "a torchvision op name (ShearX, Rotate, ...), Hue or Erase (repeatable)");
  cmd->add_option("--magnitude", a->magnitudes, "each op's magnitude (Erase: the value)");
  cmd->add_option("--in", a->inputs, "input image(s)");
  cmd->add_option("--out", a->out, "output file (PGM/PPM; raw float32 for Erase and --mix)");
  cmd->add_flag("--gray", a->gray, "decode the input as one channel");
  cmd->add_option("--box", a->box, "Erase: TOP,LEFT,HEIGHT,WIDTH")->delimiter(',');
  cmd->add_option("--bins", a->bins, "trivial | randaug: print the magnitude bins (JSON)");
  cmd->add_option("--sample", a->sample, "trivial | randaug | erasing | mixup | cutmix | both: print draws");
  cmd->add_option("--count", a->count, "draws to print");
  cmd->add_option("--seed", a->seed, "seed");
  cmd->add_option("--height", a->height, "image height for --bins and --sample");
  cmd->add_option("--width", a->width, "image width for --bins and --sample");
  cmd->add_option("--erasing-p", a->erasing_p, "RandomErasing p for --sample erasing");
  cmd->add_option("--mix", a->mix, "mixup | cutmix | both: mix the --in images as one batch");
  cmd->add_option("--mixup-alpha", a->mixup_alpha, "Mixup alpha");
  cmd->add_option("--cutmix-alpha", a->cutmix_alpha, "CutMix alpha");
  cmd->add_option("--labels", a->labels, "the --in images' labels")->delimiter(',');
  cmd->add_option("--num-classes", a->num_classes, "soft-target width");
  cmd->add_option("--batch-index", a->batch_index, "which batch's stream");
  return {cmd, [a] {
            app::run_augment_op(*a);
            return 0;
          }};
}

// A parse error as one line (an exit status), or nothing when the arguments parsed.
std::optional<int> parse_arguments(CLI::App& app, int argc, char** argv) {
  // A first argument that is no subcommand: name it, with the nearest one.
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string given = argv[1];
    std::string nearest;
    size_t best = 99;
    for (const CLI::App* sub : app.get_subcommands({})) {
      const size_t d = edit_distance(given, sub->get_name());
      if (d < best) best = d, nearest = sub->get_name();
    }
    if (best != 0)
      return fail("unknown command '" + given + "'" + (best <= 2 ? " (did you mean '" + nearest + "'?)" : "") +
                  "; the commands are train, eval, predict, export, report, inspect, lab, bench and info (ember --help)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is one line, like every other error.
    if (e.get_exit_code() == 0) return app.exit(e);
    // CLI11 says "Could not convert: --lr = abc": name the option first, as every other error does.
    const std::string what = e.what(), prefix = "Could not convert: ";
    if (const size_t eq = what.find(" = "); what.rfind(prefix, 0) == 0 && eq != std::string::npos)
      return fail(app::conversion_error(what.substr(prefix.size(), eq - prefix.size()), what.substr(eq + 3)));
    // A check's "--seed: must be ..." reads as the range checks after parsing do: "--seed must be ...".
    if (const size_t at = what.find(": must be "); at != std::string::npos && what.rfind("--", 0) == 0)
      return fail(what.substr(0, at) + what.substr(at + 1));
    return fail(what);
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  // A signal that ends the command removes the temporary file of a write in progress.
  io::remove_temp_files_on_signals();
  CLI::App app{"ember: train, evaluate and run image classifiers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", app::version_line());
  std::vector<Command> commands = {train_command(app),   eval_command(app),   predict_command(app),
                                   export_command(app),  inspect_command(app), report_command(app),
                                   info_command(app),    bench_loader_command(app)};
  for (Command& c : lab_commands(app)) commands.push_back(std::move(c));
  commands.push_back(augment_command(app));
  commands.push_back(explain_command(app));
  app::make_values_strict(app);  // Note [Strict option values]

  if (const std::optional<int> parse_failed = parse_arguments(app, argc, argv)) return *parse_failed;
  try {
    for (const Command& c : commands)
      if (*c.cli) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: error: %s\n", train::printable(e.what(), train::Newlines::keep).c_str());
    std::fflush(stderr);
    // Under mpirun the other ranks may be waiting for this one in a collective: end the job.
    parallel::abort_job(1);
    return 1;
  }
  return 0;
}
