// The training loop: the epochs of a run that start_run (train/run_start.cpp) built, with
// progress, metrics, evaluation, checkpoints and exact resume, and the run's end.

#include "explain.h"
#include "checkpoint.h"
#include "config.h"
#include "inference.h"
#include "weights.h"
#include "trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../core/profiler.h"
#include "../data/dataset.h"
#include "../data/image_dataset.h"
#include "../data/loader.h"
#include "../data/transforms.h"
#include "../io/atomic_file.h"
#include "../io/fault.h"
#include "../io/safetensors.h"
#include "../io/training_state.h"
#include "../core/cpu/parallel.h"
#include "../layers/nn_functional.h"
#include "../models/zoo.h"
#include "../optim/optim.h"
#include "../parallel/communicator.h"
#include "../parallel/ddp.h"
#include "../parallel/sync_batchnorm.h"
#include "finetune.h"
#include "graph_step.h"
#include "interrupt.h"
#include "report.h"
#include "run.h"
#include "run_dir.h"
#include "run_report.h"
#include "run_setup.h"
#include "step_guard.h"
#include "train_step.h"
#include "terminal_text.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prints the files an image dataset skipped since the last call (BadImages::skip); returns how many.
int64_t report_skipped(const data::ImageDataset* ds, const char* what, bool quiet) {
  if (ds == nullptr) return 0;
  const std::vector<data::SkippedImage> skipped = ds->take_skipped();
  if (!quiet && !skipped.empty()) {
    std::fprintf(stderr, "ember train: skipped %zu unreadable %s image%s:\n", skipped.size(), what,
                 skipped.size() == 1 ? "" : "s");
    for (size_t i = 0; i < skipped.size() && i < 10; ++i)
      std::fprintf(stderr, "  %s\n", printable(skipped[i].reason).c_str());
    if (skipped.size() > 10) std::fprintf(stderr, "  ... and %zu more\n", skipped.size() - 10);
  }
  return static_cast<int64_t>(skipped.size());
}

}  // namespace

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return Device::best();
  const Device d(spec);  // throws on anything but cpu, cuda, cuda:N
  if (d.is_cuda()) {
    EMBER_CHECK(cuda_built(), "--device ", spec, ": this build of ember has no CUDA backend (use --device cpu)");
    EMBER_CHECK(d.index < cuda_device_count(), "--device ", spec, ": no such CUDA device (this machine has ",
                cuda_device_count(), ")");
  }
  return d;
}

namespace {

// The divergence error (Note [Divergence guard] in train/step_guard.h): the step, what was not
// finite, the last finite loss, the checkpoint left as it was, and what to change. Writes the
// metrics "diverged" event.
[[noreturn]] void throw_diverged(Run& r, int64_t step, const std::string& what) {
  const TrainConfig& cfg = r.cfg;
  write_metrics(r, json{{"event", "diverged"}, {"epoch", r.epoch_now + 1}, {"step", step},
                        {"last_finite_loss", std::isfinite(r.last_finite_loss) ? json(r.last_finite_loss) : json()}}
                   .dump());
  const std::string saved = r.checkpoint && r.checkpoint->saved() ? "; the checkpoint in '" + cfg.save_dir +
                                                                         "' (step " + std::to_string(r.checkpoint->step()) +
                                                                         ") is untouched"
                                                                   : "";
  char last[96] = "no step had a finite loss";
  if (std::isfinite(r.last_finite_loss))
    std::snprintf(last, sizeof last, "the last finite loss was %.6g at step %lld", r.last_finite_loss,
                  static_cast<long long>(r.last_finite_step));
  EMBER_THROW("training diverged at step ", step, " (epoch ", r.epoch_now + 1, "): ", what, "; ", last, saved,
              ". Lower --lr (", cfg.lr, ")", cfg.clip_grad_norm > 0 ? "" : ", add --clip-grad-norm 1",
              " or use --warmup-epochs");
}

bool parameters_finite(const nn::Module& model) {
  for (const Tensor& p : model.parameters()) {
    const std::vector<double> v = p.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
    if (!std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); })) return false;
  }
  return true;
}

// Reads the guard (Note [Divergence guard] in train/step_guard.h) and keeps its last finite
// loss; after a non-finite loss, stops the run naming the first step that had one.
StepGuard::Totals read_guard(Run& r) {
  const StepGuard::Totals g = r.guard->read();
  if (g.finite_steps > 0) {
    r.last_finite_loss = g.last_finite_loss;
    r.last_finite_step = g.last_finite_step;
  }
  if (g.diverged)
    throw_diverged(r, g.first_bad_step, std::string("the loss is ") + (std::isnan(g.first_bad_loss) ? "NaN" : "infinite"));
  return g;
}

// Why --early-stop-patience ended the run, in words.
std::string early_stop_detail(const Run& r) {
  char text[192];
  std::snprintf(text, sizeof text, "%s did not improve for %lld evaluation(s); best %.6g at epoch %lld",
                r.cfg.early_stop_metric.c_str(), static_cast<long long>(r.cfg.early_stop_patience), r.early_stop->best(),
                static_cast<long long>(r.early_stop->best_at()));
  return text;
}

// One epoch's running sums on this process.
struct EpochTotals {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  std::chrono::steady_clock::time_point started;
  double loader_wait_before = 0;  // the loader's wait_seconds when the epoch started
};

// One optimizer step on the micro-batches gathered from the loader (one without --accum-steps):
// the step, eager or replayed, the scheduler, and the progress and step event. Returns whether
// the epoch stops here (--max-steps, an interrupt).
bool run_one_step(Run& r, EpochTotals& t, int epoch, std::vector<data::Batch>& group) {
  const TrainConfig& cfg = r.cfg;
  data::DataLoader& loader = *r.loader;
  r.epoch_now = epoch;
  const profiler::Scope step_scope("step", profiler::Phase::step);
  // EMBER_FAULT=slow-step-ms:N (a testing hook): the whole N ms, even across a signal.
  if (const int64_t ms = io::fault_value("slow-step-ms"); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  int64_t n = 0;
  for (const data::Batch& b : group) n += b.labels.size(0);
  const double lr_used = r.optimizer->get_lr(0);
  // A step event reads the guard: only when a metrics stream takes it.
  const bool step_event = (r.step + 1) % cfg.log_every == 0 && r.metrics_enabled;
  bool interrupt = interrupt_requested();
  const Tensor& host_images = group.front().images;
  const Tensor& host_labels = group.front().labels;
  if (r.graphed && group.size() == 1 && r.graphed->replays(host_images, host_labels)) {
    // --cuda-graphs (Note [Training with CUDA graphs] in train/graph_step.h): the whole step,
    // the guard's record included, is one replay.
    const bool capture = r.graphed->node_count() == 0;
    r.graphed->run(host_images, host_labels);
    if (capture && r.lead && !cfg.quiet)
      std::fprintf(stderr, "ember train: --cuda-graphs: step %lld captured as a CUDA graph of %zu nodes; every full "
                   "batch replays it\n", static_cast<long long>(r.step + 1), r.graphed->node_count());
  } else {
    std::vector<TrainStep::Batch> micro;
    {
      const profiler::Scope scope("to device", profiler::Phase::data);
      for (const data::Batch& b : group) {
        check_class_indices(b.labels, static_cast<int64_t>(r.d.classes.size()));
        micro.push_back({b.images.to(r.device).contiguous(model_input_format(r.cfg)), b.labels.to(r.device)});
      }
    }
    // With several processes every rank stops at the same step, before its update (Note
    // [Divergence guard]); an interrupt on one rank stops them all.
    const auto agree_to_stop = [&] {
      const bool diverged = r.guard->read().diverged;
      Tensor flags = from_vector<double>({diverged ? 1.0 : 0.0, interrupt ? 1.0 : 0.0});
      r.comm->all_reduce(flags);
      const std::vector<double> v = flags.to_vector<double>();
      interrupt = v[1] > 0;
      if (v[0] > 0) {
        read_guard(r);  // throws when this rank's own loss was not finite
        throw_diverged(r, r.step + 1, "the loss of another process was not finite");
      }
    };
    const TrainStep::Outputs out = r.train_step->run(micro, StepMode::eager, r.step + 1,
                                                     r.distributed ? TrainStep::BeforeUpdate(agree_to_stop) : nullptr);
    // --cuda-graphs: the first full batch that updated the optimizer is the warm-up; the next
    // one of its shapes is captured (Note [Training with CUDA graphs]).
    if (r.graphed && n == cfg.batch_size && out.stepped) r.graphed->eager_step_done(host_images, host_labels);
  }
  if (r.scheduler) r.scheduler->step();
  ++r.step;
  t.seen += n;
  const double ips = static_cast<double>(t.seen) / std::max(1e-9, seconds_since(t.started));
  // The optimizer steps of the epoch so far (--accum-steps: micro-batches / K, rounded up).
  const int64_t batch = loader.position().batch;
  const int64_t shown = batch == 0 ? r.steps_per_epoch : (batch + cfg.accum_steps - 1) / cfg.accum_steps;
  if (r.progress.due(shown) || step_event) {
    const StepGuard::Totals g = read_guard(r);  // throws after a non-finite loss
    if (r.progress.due(shown))
      r.progress.step(shown, g.loss_sum / static_cast<double>(t.seen), g.correct / static_cast<double>(t.seen), ips);
    if (step_event) {
      json event{{"event", "step"},
                 {"epoch", epoch + 1},
                 {"step", r.step},
                 {"loss", g.step_loss},
                 {"acc", g.step_correct / static_cast<double>(n)},
                 {"lr", lr_used},
                 {"images_per_sec", ips}};
      if (r.scaler->is_enabled()) event["loss_scale"] = r.scaler->get_scale();  // S for the next step
      write_metrics(r, event.dump());
    }
  }
  if (cfg.max_steps > 0 && r.step >= cfg.max_steps) {
    r.stopped = true;
    return true;
  }
  if (interrupt) {
    r.stopped = r.interrupted = true;
    return true;
  }
  return false;
}

// The steps of one epoch (or of its remainder, after a resume), until the loader's epoch ends or
// --max-steps is reached. Returns this process's sums. With --accum-steps K a step takes the
// loader's batches K at a time, from the epoch's start (the last step of an epoch may take
// fewer), so every step, and every checkpoint, ends at a loader position that is a multiple of K
// or the epoch's end.
EpochTotals train_one_epoch(Run& r, int epoch) {
  const TrainConfig& cfg = r.cfg;
  data::DataLoader& loader = *r.loader;
  // The loader is a cursor (data/loader.h): a resumed run picks up mid-epoch where it stopped.
  if (loader.position().epoch != epoch) loader.set_epoch(epoch);
  EpochTotals t;
  t.started = std::chrono::steady_clock::now();
  t.loader_wait_before = loader.stats().wait_seconds;
  r.progress.start_epoch(epoch + 1, cfg.epochs, r.steps_per_epoch);
  // Evaluation leaves the model in eval mode: training mode again (Note [Fine-tuning] in
  // train/finetune.h for a frozen backbone).
  if (cfg.freeze_backbone)
    train_with_frozen_backbone(*r.model, cfg.model);
  else
    r.model->train();
  // The epoch's loss and correct sums stay on the training device until a read (Note [Divergence
  // guard] in train/step_guard.h): a step event, a progress line, the end of the epoch.
  r.guard->start_epoch(r.step);
  std::vector<data::Batch> group;  // the micro-batches of the step being gathered
  for (data::Batch& batch : loader) {
    if (batch.labels.numel() == 0) {  // every file of the batch was unreadable and skipped
      // Every rank must take part in each step's gradient all-reduce: no step can be left out.
      EMBER_CHECK(!r.distributed, "every image of a batch was unreadable (--skip-bad-images); with several "
                  "processes a step cannot be skipped: remove the files (ember inspect lists them)");
    } else {
      group.push_back(std::move(batch));
    }
    const int64_t next = loader.position().batch;  // 0 once the epoch's last batch is handed out
    if (next % cfg.accum_steps != 0 || group.empty()) continue;
    const bool stop = run_one_step(r, t, epoch, group);
    group.clear();
    if (stop) break;
  }
  const StepGuard::Totals g = read_guard(r);
  t.loss_sum = g.loss_sum;
  t.correct = static_cast<int64_t>(g.correct);
  r.progress.end_epoch();
  return t;
}

// An evaluation's metric for --scheduler plateau and --early-stop-patience (Note [Plateaus and
// early stopping] in train/early_stopping.h): the plateau's step (a lowered lr is said), and
// early stopping's, which ends the run after this epoch.
void watch_evaluation(Run& r, const EpochStats& es) {
  const TrainConfig& cfg = r.cfg;
  const auto metric = [&](const std::string& name) { return name.ends_with("_acc") ? es.test_acc : es.test_loss; };
  if (r.plateau) {
    const double before = r.optimizer->get_lr(0);
    if (r.plateau->step(metric(cfg.plateau_metric)) && !cfg.quiet && r.lead)
      std::fprintf(stderr, "ember train: %s did not improve for %lld evaluation(s) after its best (%.6g): lr %.6g -> "
                   "%.6g\n", cfg.plateau_metric.c_str(), static_cast<long long>(cfg.plateau_patience + 1),
                   r.plateau->best(), before, r.optimizer->get_lr(0));
  }
  if (r.early_stop && r.early_stop->step(metric(cfg.early_stop_metric), es.epoch)) {
    r.stopped = r.stopped_early = true;
    if (!cfg.quiet && r.lead)
      std::fprintf(stderr, "ember train: stopping early: %s\n", early_stop_detail(r).c_str());
  }
}

// After an epoch's steps: the epoch's numbers over every rank, the checkpoint (before anything
// that can fail, such as the evaluation), evaluation when due (not after an interrupt), the best
// pointer, the metrics line and the printed line.
void finish_epoch(Run& r, int epoch, EpochTotals t) {
  const TrainConfig& cfg = r.cfg;
  const int64_t skipped_train = report_skipped(r.d.image_train.get(), "training", cfg.quiet);
  if (r.distributed) {
    // The epoch's numbers over every rank's shard.
    Tensor all = from_vector<double>({t.loss_sum, static_cast<double>(t.correct), static_cast<double>(t.seen)});
    r.comm->all_reduce(all);
    const std::vector<double> v = all.to_vector<double>();
    t.loss_sum = v[0];
    t.correct = static_cast<int64_t>(v[1]);
    t.seen = static_cast<int64_t>(v[2]);
  }
  const double epoch_seconds = seconds_since(t.started);
  r.train_seconds += epoch_seconds;
  r.train_images += t.seen;
  EpochStats es;
  es.epoch = epoch + 1;
  es.train_loss = t.seen ? t.loss_sum / static_cast<double>(t.seen) : NAN;
  es.train_acc = t.seen ? static_cast<double>(t.correct) / static_cast<double>(t.seen) : NAN;
  es.images_per_sec = static_cast<double>(t.seen) / std::max(1e-9, epoch_seconds);
  es.seconds = epoch_seconds;
  const bool epoch_done = r.loader->position().batch == 0;
  const bool last = epoch + 1 == cfg.epochs || r.stopped;
  // A finite loss can still leave non-finite weights after the step's update (the next loss would
  // show it): checked before they could be saved. The weights are the same on every rank.
  if (!parameters_finite(*r.model)) throw_diverged(r, r.step, "the weights hold a NaN or an infinity after the update");
  if (r.checkpoint) {
    r.checkpoint->save(cfg, r.d, *r.model, run_training_state(r, epoch_done ? epoch + 1 : epoch));
    // A new run's metrics stream takes the place of an earlier run's at its first save.
    if (r.run_metrics) r.run_metrics->commit();
  }
  if (((epoch_done && (epoch + 1) % cfg.eval_every == 0) || last) && !r.interrupted) {
    const profiler::Scope scope("evaluate", profiler::Phase::eval);
    // A saved run keeps the evaluation's most confident mistakes for its report.
    const MistakeOptions mistakes{.keep = r.checkpoint ? kReportMistakes : 0, .mean = r.d.mean, .std = r.d.std};
    EvalResult ev = with_eval_backoff(r, [&] {
      return evaluate_loader(*r.model, *r.test_loader, static_cast<int64_t>(r.d.classes.size()), r.comm.get(),
                             mistakes);
    });
    report_skipped(r.d.image_test.get(), "validation", cfg.quiet);
    if (ev.interrupted) {  // the checkpoint above is saved; a partial evaluation is no result
      r.stopped = r.interrupted = true;
      ev = EvalResult{};
      ev.accuracy = ev.loss = NAN;
    }
    if (r.checkpoint && !r.interrupted)
      write_evaluation_file((fs::path(cfg.save_dir) / kEvaluationFileName).string(), ev, r.d.classes, es.epoch, r.step);
    es.test_loss = ev.loss;
    es.test_acc = ev.accuracy;
    r.summary.test_acc = ev.accuracy;
    r.summary.test_loss = ev.loss;
    // Only the evaluations at the end of an epoch: a --max-steps stop mid-epoch leaves them to the
    // resumed run's epoch end, as an uninterrupted run would.
    if (!r.interrupted && epoch_done && (r.plateau || r.early_stop)) {
      watch_evaluation(r, es);
      // The checkpoint again, with the decisions the evaluation took (Note [Plateaus and early stopping]).
      if (r.checkpoint) r.checkpoint->save(cfg, r.d, *r.model, run_training_state(r, epoch_done ? epoch + 1 : epoch));
    }
  }
  write_metrics(r, json{{"event", "epoch"}, {"epoch", es.epoch}, {"train_loss", es.train_loss},
                        {"train_acc", es.train_acc}, {"test_loss", std::isnan(es.test_loss) ? json() : json(es.test_loss)},
                        {"test_acc", std::isnan(es.test_acc) ? json() : json(es.test_acc)},
                        {"images_per_sec", es.images_per_sec}, {"seconds", es.seconds},
                        {"loader_wait_seconds", r.loader->stats().wait_seconds - t.loader_wait_before},
                        {"skipped_images", skipped_train}}
                   .dump());
  if (!cfg.quiet) {
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f acc %.2f%%", es.epoch, cfg.epochs, es.train_loss,
                 100 * es.train_acc);
    if (!std::isnan(es.test_acc)) std::fprintf(stderr, ", test loss %.4f acc %.2f%%", es.test_loss, 100 * es.test_acc);
    std::fprintf(stderr, ", %.0f img/s, %s\n", es.images_per_sec, format_duration(es.seconds).c_str());
  }
  r.summary.epochs.push_back(es);
  // "best" among finite evaluations only (Note [Divergence guard] in train/step_guard.h).
  const bool improved = std::isfinite(es.test_acc) && std::isfinite(es.test_loss) && es.test_acc > r.best_acc;
  if (improved) {
    r.best_acc = es.test_acc;
    if (r.checkpoint) r.checkpoint->mark_best(es.test_acc);
  }
}

// Note [A bad file mid-run]
// Without --skip-bad-images a file that cannot be read or decoded ends the run (data::BadImages::
// error), whether it was bad from the start or went bad while the run was reading it (replaced,
// truncated, deleted). Either way the steps since the last checkpoint are not lost: with --save,
// the run saves them first, as an interrupt does (the loader stands at the batch that failed, so
// the resumed run retries it), then fails with the file's message and how to continue. It saves
// nothing when the steps since the checkpoint diverged (read_guard throws first), with several
// processes (the other ranks cannot join a save begun by one rank's failure), when nothing
// was trained since the last save, or with --accum-steps when the file is inside a step's group of
// micro-batches (a step's gradients are not saved, and the micro-batches before the file have
// moved BatchNorm's statistics: the last checkpoint is the exact one). With --skip-bad-images the file is left out and reported at
// the end of the epoch instead, whenever it went bad.
[[noreturn]] void stop_at_bad_file(Run& r, int epoch, const data::BadImageError& e) {
  const int64_t saved_step = r.checkpoint && r.checkpoint->saved() ? r.checkpoint->step() : 0;
  const bool step_boundary = r.loader->position().batch % r.cfg.accum_steps == 0;
  if (r.checkpoint && !r.distributed && r.step > saved_step && step_boundary) {
    read_guard(r);  // a divergence since the last read is the error to report, and is not saved
    if (parameters_finite(*r.model)) {
      r.checkpoint->save(r.cfg, r.d, *r.model, run_training_state(r, epoch));
      EMBER_THROW(e.what(), "; the run's ", r.step - saved_step, " step(s) since its last checkpoint are saved in '",
                  printable(r.cfg.save_dir), "' (step ", r.step, "): make the file readable again, then continue "
                  "with: ember train --resume ", shell_quote(r.cfg.save_dir));
    }
  }
  throw e;
}

// After the last epoch: --save-weights, the summary metrics event and the one-line summary.
TrainSummary finish_run(Run& r, std::chrono::steady_clock::time_point t_start) {
  const TrainConfig& cfg = r.cfg;
  if (r.profiler) {
    r.profiler->stop();
    if (cfg.profile && r.lead)
      std::fprintf(stderr, "ember train: profile of %lld steps (%s)\n%s", static_cast<long long>(r.step),
                   r.device.str().c_str(), r.profiler->table(-1).c_str());
    if (!cfg.profile_trace.empty() && r.lead) {
      io::write_file_atomic(cfg.profile_trace, r.profiler->trace_json());
      if (!cfg.quiet) std::fprintf(stderr, "ember train: wrote the trace %s\n", printable(cfg.profile_trace).c_str());
    }
  }
  // --save-weights means the weights at the end of the run: an interrupted run has none yet.
  if (!cfg.save_weights.empty() && r.lead && !r.interrupted) save_weights(cfg.save_weights, *r.model, cfg, r.d);
  TrainSummary& summary = r.summary;
  summary.steps = r.step;
  summary.interrupted = r.interrupted;
  summary.epochs_run = r.epoch_now + 1;
  const bool epoch_done = r.loader->position().batch == 0;
  summary.stopped_early = r.stopped && !r.interrupted && !(epoch_done && r.epoch_now + 1 == cfg.epochs);
  summary.stop_reason = r.interrupted            ? "interrupted"
                        : !summary.stopped_early ? "completed"
                        : r.stopped_early        ? "early_stop"
                                                 : "max_steps";
  if (summary.stop_reason == "early_stop") summary.stop_detail = early_stop_detail(r);
  summary.seconds = seconds_since(t_start);
  summary.images_per_sec = static_cast<double>(r.train_images) / std::max(1e-9, r.train_seconds);
  write_metrics(r, json{{"event", "summary"}, {"test_acc", std::isnan(summary.test_acc) ? json() : json(summary.test_acc)},
                        {"test_loss", std::isnan(summary.test_loss) ? json() : json(summary.test_loss)},
                        {"images_per_sec", summary.images_per_sec}, {"seconds", summary.seconds}, {"steps", r.step},
                        {"interrupted", r.interrupted}, {"stop_reason", summary.stop_reason},
                        {"stop_detail", summary.stop_detail.empty() ? json() : json(summary.stop_detail)}}
                   .dump());
  // The run directory's report (train/run_report.h). The run is saved whatever happens here: a
  // report that cannot be written is a warning.
  std::string report;
  if (r.lead && !cfg.save_dir.empty()) {
    try {
      report = (fs::path(cfg.save_dir) / kReportFileName).string();
      write_run_report({cfg.save_dir}, report);
    } catch (const Error& e) {
      report.clear();
      std::fprintf(stderr, "ember train: warning: no report written: %s\n", e.what());
    }
  }
  const auto print_saved = [&] {
    if (cfg.quiet || !r.lead || cfg.save_dir.empty()) return;
    std::fprintf(stderr, "ember train: saved in %s: the checkpoint (%s, step-*/), %s%s%s\n", printable(cfg.save_dir).c_str(),
                 kManifestName, kMetricsFileName,
                 fs::exists(fs::path(cfg.save_dir) / kEvaluationFileName) ? ", evaluation.json" : "",
                 report.empty() ? "" : ", report.html");
    if (!report.empty())
      std::fprintf(stderr, "ember train: report: %s (open it in a browser; rebuild it with: ember report %s)\n",
                   printable(report).c_str(), shell_quote(cfg.save_dir).c_str());
  };
  if (r.interrupted) {
    print_saved();
    if (r.lead) {
      if (r.checkpoint)
        std::fprintf(stderr, "ember train: interrupted at step %lld (epoch %d of %d); checkpoint saved in %s; "
                     "continue with: ember train --resume %s\n", static_cast<long long>(r.step), r.epoch_now + 1,
                     cfg.epochs, printable(cfg.save_dir).c_str(), shell_quote(cfg.save_dir).c_str());
      else
        std::fprintf(stderr, "ember train: interrupted at step %lld (epoch %d of %d); nothing was saved (no --save)\n",
                     static_cast<long long>(r.step), r.epoch_now + 1, cfg.epochs);
    }
    return summary;
  }
  if (!cfg.quiet) {
    const std::string procs = r.distributed ? ", " + std::to_string(cfg.world_size) + " processes" : "";
    char span[128];
    if (summary.stop_reason == "early_stop")
      std::snprintf(span, sizeof span, "stopped early after epoch %d of %d (--early-stop-patience)", r.epoch_now + 1,
                    cfg.epochs);
    else if (summary.stopped_early)
      std::snprintf(span, sizeof span, "stopped by --max-steps at step %lld in epoch %d of %d",
                    static_cast<long long>(r.step), r.epoch_now + 1, cfg.epochs);
    else
      std::snprintf(span, sizeof span, "%d epochs", cfg.epochs);
    const std::string why = summary.stop_detail.empty() ? "" : " (" + summary.stop_detail + ")";
    std::printf("ember train: %s on %s, %s%s, test accuracy %.2f%%, %.0f images/s, %s%s\n", cfg.model.c_str(),
                printable(cfg.data).c_str(), span, procs.c_str(), 100 * summary.test_acc, summary.images_per_sec,
                format_duration(summary.seconds).c_str(), why.c_str());
  }
  print_saved();
  return summary;
}

}  // namespace

TrainSummary run_training(TrainConfig cfg) {
  const auto t_start = std::chrono::steady_clock::now();
  const InterruptHandlers handlers(!cfg.quiet);
  if (!cfg.explain.empty()) prepare_emulator_for_explain(cfg.explain);
  Run run = start_run(std::move(cfg));
  run.model->train();
  if (!run.cfg.explain.empty()) {
    const data::Batch batch = run.loader->load_batch(0, 0);
    std::fputs(explain_step(run, batch.images, batch.labels, ExplainOptions{.gpu = run.cfg.explain}).text.c_str(),
               stdout);
    return run.summary;
  }
  if (run.start_epoch >= run.cfg.epochs) {
    if (!run.cfg.quiet && run.lead)
      std::fprintf(stderr, "ember train: the run in %s is complete (step %lld, %d epochs); give --epochs above %d "
                   "to train it further\n", printable(run.cfg.resume_dir).c_str(), static_cast<long long>(run.step),
                   run.cfg.epochs, run.cfg.epochs);
    run.summary.steps = run.step;
    run.summary.epochs_run = run.cfg.epochs;
    return run.summary;
  }
  // A run that --early-stop-patience ended stays ended (Note [Plateaus and early stopping]).
  if (run.stopped_early) {
    if (!run.cfg.quiet && run.lead)
      std::fprintf(stderr, "ember train: the run in %s stopped early at step %lld (%s): nothing to train\n",
                   printable(run.cfg.resume_dir).c_str(), static_cast<long long>(run.step),
                   early_stop_detail(run).c_str());
    run.summary.steps = run.step;
    run.summary.stopped_early = true;
    run.summary.stop_reason = "early_stop";
    run.summary.stop_detail = early_stop_detail(run);
    return run.summary;
  }
  // --max-steps counts from the run's start: a resumed run at or past it has nothing to train.
  if (run.cfg.max_steps > 0 && run.step >= run.cfg.max_steps) {
    if (!run.cfg.quiet && run.lead)
      std::fprintf(stderr, "ember train: the run in %s is at step %lld, and --max-steps %lld counts from the run's "
                   "start: nothing to train (give --max-steps above %lld to train further)\n",
                   printable(run.cfg.resume_dir).c_str(), static_cast<long long>(run.step),
                   static_cast<long long>(run.cfg.max_steps), static_cast<long long>(run.step));
    run.summary.steps = run.step;
    run.summary.stopped_early = true;
    return run.summary;
  }
  for (int epoch = run.start_epoch; epoch < run.cfg.epochs && !run.stopped; ++epoch) {
    EpochTotals totals;
    try {
      totals = train_one_epoch(run, epoch);
    } catch (const data::BadImageError& e) {
      stop_at_bad_file(run, epoch, e);
    }
    finish_epoch(run, epoch, totals);
  }
  return finish_run(run, t_start);
}

}  // namespace ember::train
