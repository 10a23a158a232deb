// The training loop: data, model, optimizer and schedule from a TrainConfig; progress, metrics,
// checkpoints and exact resume.

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
#include "checkpoint.h"
#include "finetune.h"
#include "graph_step.h"
#include "interrupt.h"
#include "report.h"
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

// The memory format the model's input is given in (--channels-last).
MemoryFormat model_input_format(const TrainConfig& c) {
  return c.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
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

// Everything one training run holds, built by start_run and carried through the epochs. Members
// are destroyed in reverse order: the DDP wrapper before the model, loaders before the data, the
// communicator last.
struct Run {
  TrainConfig cfg;
  std::shared_ptr<parallel::Communicator> comm;
  bool distributed = false;
  bool lead = true;  // rank 0: prints, writes metrics, saves checkpoints
  Device device;
  DataInfo d;
  std::unique_ptr<data::DataLoader> loader, test_loader;
  int64_t steps_per_epoch = 0;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler;
  // --amp (Note [Mixed-precision training] in train/train_step.cpp): the autocast dtype, and the
  // loss scaler (enabled with fp16 only; disabled, each of its calls passes its argument through).
  std::optional<DType> amp_dtype;
  std::unique_ptr<optim::GradScaler> scaler;
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<MetricsWriter> metrics;      // --metrics FILE (writes nothing without it)
  std::unique_ptr<MetricsWriter> run_metrics;  // rank 0 with --save DIR: DIR/metrics.jsonl
  std::unique_ptr<nn::CrossEntropyLoss> criterion;
  std::unique_ptr<CheckpointWriter> checkpoint;  // rank 0 with --save
  std::string run_id;
  int64_t eval_batch = 0;  // the evaluation batch: --batch-size, halved on out-of-memory
  Progress progress{true};
  std::unique_ptr<profiler::Profiler> profiler;  // --profile, --profile-trace: from the first step
  std::unique_ptr<TrainStep> train_step;         // the step, eager and captured alike
  std::unique_ptr<GraphedStep> graphed;          // --cuda-graphs
  // The running sums and the divergence flag on the device (Note [Divergence guard] in
  // train/step_guard.h); its flag is the optimizer's skip flag.
  std::unique_ptr<StepGuard> guard;
  bool metrics_enabled = false;  // a metrics stream takes the step events
  // Position and totals.
  int64_t step = 0;
  int start_epoch = 0;
  int epoch_now = 0;  // 0-based epoch of the last step
  double best_acc = -1;
  bool stopped = false;      // --max-steps reached, or interrupted
  bool interrupted = false;  // SIGINT / SIGTERM (Note [Clean interrupts])
  double last_finite_loss = NAN;
  int64_t last_finite_step = 0;
  double train_seconds = 0;
  int64_t train_images = 0;
  TrainSummary summary;
};

// One metrics event, into --metrics FILE and into the --save directory's metrics.jsonl.
void write_metrics(Run& r, const std::string& line) {
  r.metrics->write_line(line);
  if (r.run_metrics) r.run_metrics->write_line(line);
}

bool is_out_of_memory(const Error& e) { return std::string(e.what()).find("out of memory") != std::string::npos; }

// EMBER_FAULT=oom-eval-above:B (Note [Fault injection] in io/fault.h): evaluation batches larger
// than B fail as a device would.
void inject_eval_oom(int64_t batch) {
  const int64_t limit = io::fault_value("oom-eval-above");
  if (limit >= 0 && batch > limit)
    EMBER_THROW("CUDA out of memory (EMBER_FAULT=oom-eval-above:", limit, ") evaluating a batch of ", batch);
}

std::unique_ptr<data::DataLoader> make_test_loader(const TrainConfig& cfg, const DataInfo& d, int64_t batch) {
  std::shared_ptr<const data::Dataset> test_set = d.test;
  if (cfg.eval_limit > 0) test_set = std::make_shared<data::PrefixDataset>(d.test, cfg.eval_limit);
  return std::make_unique<data::DataLoader>(test_set,
                                            data::LoaderOptions{.batch_size = batch, .transform = make_eval_transform(d)});
}

// Runs `body` (an evaluation with r.test_loader); on out of memory halves the evaluation batch and
// tries again, down to 1.
template <typename F>
auto with_eval_backoff(Run& r, F body) {
  for (;;) {
    try {
      inject_eval_oom(r.eval_batch);
      return body();
    } catch (const Error& e) {
      if (!is_out_of_memory(e) || r.eval_batch <= 1) throw;
      const int64_t half = r.eval_batch / 2;
      if (!r.cfg.quiet)
        std::fprintf(stderr, "ember train: evaluation ran out of memory with batch %lld; retrying with batch %lld\n",
                     static_cast<long long>(r.eval_batch), static_cast<long long>(half));
      r.eval_batch = half;
      r.test_loader = make_test_loader(r.cfg, r.d, half);
    }
  }
}

// An output file (--save-weights, --profile-trace): not a directory, not one of a run directory's
// own files (train/run_dir.h), not something ember may not write to (io/atomic_file.h), its folder
// created, writable, all before the first step. Leaves no file behind.
void check_output_file(const char* option, const std::string& path, const std::vector<std::string>& run_dirs,
                       const char* example = "model.safetensors") {
  EMBER_CHECK(!fs::is_directory(path), option, " '", path, "' is a directory; name a file in it, e.g. '",
              (fs::path(path) / example).string(), "'");
  check_output_path(option, path, run_dirs);
  try {
    io::inspect_output(path);
  } catch (const Error& e) {
    EMBER_THROW(option, ": ", e.what());
  }
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  EMBER_CHECK(!ec && fs::is_directory(dir), option, ": cannot create directory '", dir.string(), "' for '", path, "'",
              ec ? ": " + ec.message() : std::string());
  EMBER_CHECK(::access(dir.c_str(), W_OK) == 0, option, ": cannot write into '", dir.string(), "': ",
              std::strerror(errno));
}

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

// One epoch's running sums on this process.
struct EpochTotals {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  std::chrono::steady_clock::time_point started;
  double loader_wait_before = 0;  // the loader's wait_seconds when the epoch started
};

// The launcher, the configuration (resumed or resolved), data, loaders, model, optimizer,
// schedule, checkpoint state, DDP and the metrics file: everything before the first step.
Run start_run(TrainConfig cfg) {
  Run r;
  // One process, or one rank of an mpirun / srun job (docs/distributed.md).
  const parallel::LaunchInfo launch = parallel::detect_launch();
  // One GPU per process: --device cuda (or auto on a GPU machine) means cuda:<local rank>, and the
  // communicator reduces on that device (NCCL where the build has it; parallel::init_from_env).
  if (launch.world_size > 1 && (cfg.device == "cuda" || (cfg.device == "auto" && Device::best().is_cuda())))
    cfg.device = "cuda:" + std::to_string(launch.local_rank);
  r.comm = parallel::init_from_env(launch.world_size > 1 ? resolve_device(cfg.device) : Device::cpu());
  const int rank = r.comm->rank();
  cfg.world_size = r.comm->world_size();
  r.distributed = cfg.world_size > 1;
  if (r.distributed) {
    // Ranks on one machine share its cores; only rank 0 talks.
    if (cfg.threads == 0) cfg.threads = std::max(1, get_num_threads() / std::max(1, launch.local_world_size));
    if (rank != 0) {
      cfg.quiet = true;
      cfg.metrics_path.clear();
    }
  }
  r.lead = rank == 0;
  std::optional<CheckpointReader> resume_reader;
  std::optional<io::TrainingState> resume_state;
  std::optional<Manifest> resumed;
  std::vector<std::string> changed;
  if (!cfg.resume_dir.empty()) {
    // The run continues with the configuration it was started with; --epochs may extend it.
    EMBER_CHECK(std::filesystem::is_directory(cfg.resume_dir), "--resume: checkpoint directory '", cfg.resume_dir,
                "' does not exist");
    EMBER_CHECK(has_checkpoint(cfg.resume_dir), "--resume: '", cfg.resume_dir, "' holds no checkpoint (no ",
                kManifestName, "; nothing was saved there, or it was written by an older ember)");
    // Every file checked against the manifest, and kept in place until the weights are loaded
    // (a run still writing there removes nothing a reader holds).
    resume_reader.emplace(cfg.resume_dir);
    resumed = resume_reader->manifest();
    resume_state = io::load_training_state(resume_reader->path(resumed->state));
    apply_saved_config(*resume_state, cfg, changed);
    r.run_id = resumed->run;
    // Resuming keeps saving into the same directory.
    if (cfg.save_dir.empty()) cfg.save_dir = cfg.resume_dir;
  } else {
    r.run_id = new_run_id();
  }
  const std::vector<std::string> chose = resolve(cfg);
  validate(cfg);
  // --save checks that need no data, before the data is read (CheckpointWriter checks the rest).
  if (r.lead && !cfg.save_dir.empty()) {
    EMBER_CHECK(!fs::exists(cfg.save_dir) || fs::is_directory(cfg.save_dir), "--save: '", cfg.save_dir,
                "' is a file, not a directory");
    const bool continuing = resumed && fs::exists(cfg.save_dir) && fs::equivalent(cfg.save_dir, cfg.resume_dir);
    EMBER_CHECK(continuing || cfg.overwrite || !has_checkpoint(cfg.save_dir), "--save: '", cfg.save_dir,
                "' already holds a checkpoint; continue it with --resume ", cfg.save_dir,
                ", or pass --overwrite to replace it with this run");
    // What ember may not touch there is refused now; CheckpointWriter looks again under the lock.
    survey_run_dir(cfg.save_dir, continuing       ? RunDirUse::continuing
                                 : cfg.overwrite  ? RunDirUse::overwrite
                                                  : RunDirUse::new_run);
  }
  if (r.lead && !cfg.save_weights.empty())
    EMBER_CHECK(!fs::is_directory(cfg.save_weights), "--save-weights '", cfg.save_weights,
                "' is a directory; name a file in it, e.g. '", (fs::path(cfg.save_weights) / "model.safetensors").string(),
                "'");
  const auto given = [&](const char* name) {
    return std::find(cfg.explicitly_set.begin(), cfg.explicitly_set.end(), name) != cfg.explicitly_set.end();
  };
  if (given("momentum") && cfg.optimizer != "sgd" && !cfg.quiet && r.lead)
    std::fprintf(stderr, "ember train: warning: --momentum applies to --optimizer sgd only; %s ignores it\n",
                 cfg.optimizer.c_str());
  if (resumed && !cfg.quiet && r.lead) {
    std::string s;
    for (const std::string& x : changed) s += (s.empty() ? "" : ", ") + x;
    std::fprintf(stderr, "ember train: resuming run %s from %s at step %lld (%lld epoch(s) done)%s%s\n",
                 resumed->run.c_str(), printable(cfg.resume_dir).c_str(), static_cast<long long>(resumed->step),
                 static_cast<long long>(resumed->epoch), s.empty() ? "" : "; changed: ", s.c_str());
  }
  r.device = resolve_device(cfg.device);
  if (cfg.threads > 0) set_num_threads(cfg.threads);

  // Data (first, so that a missing dataset is the only thing printed).
  r.d = open_data(cfg.data, cfg.data_dir,
                  {.val = cfg.val, .val_split = cfg.val_split, .image_size = cfg.image_size,
                   .cache_dir = cfg.cache_dir, .skip_bad_images = cfg.skip_bad_images, .seed = cfg.seed});
  const DataInfo& d = r.d;
  if (resume_state) check_resumed_data(*resume_state, d);  // the data it was saved with (Note [Held-out split])
  if (d.kind != DataKind::image_folder)
    for (const char* name : {"val", "val-split", "image-size", "cache", "skip-bad-images"})
      EMBER_CHECK(!given(name), "--", name, " applies to ImageFolder data only, and '", cfg.data, "' holds ",
                  is_cifar_dir(d.dir) ? "CIFAR batches" : "IDX files", " (docs/data.md)");
  if (!cfg.quiet && !chose.empty() && !resumed) {
    std::string s;
    for (const std::string& x : chose) s += (s.empty() ? "" : ", ") + x;
    std::fprintf(stderr, "ember train: recipe chose %s\n", s.c_str());
  }
  const bool flip = cfg.data == "fashion-mnist";
  data::AnyTransform train_tf =
      cfg.augment ? data::AnyTransform(make_train_transform(d, flip, cfg.augment_policy, cfg.random_erasing))
                  : data::AnyTransform(make_eval_transform(d));
  data::LoaderOptions train_options{.batch_size = cfg.batch_size, .shuffle = cfg.shuffle, .drop_last = false,
                                    .seed = cfg.seed, .transform = train_tf,
                                    .mix = {.mixup_alpha = cfg.mixup, .cutmix_alpha = cfg.cutmix,
                                            .num_classes = static_cast<int64_t>(d.classes.size())},
                                    .num_workers = cfg.workers};
  if (r.distributed) {
    // Each rank reads its shard of every epoch (the same shuffle everywhere, keyed by --seed) and
    // augments with its own streams.
    train_options.sampler = std::make_shared<data::DistributedSampler>(
        d.train->size(), data::DistributedOptions{.rank = rank, .world_size = cfg.world_size, .shuffle = cfg.shuffle,
                                                  .seed = cfg.seed});
    train_options.shuffle = false;
    train_options.seed = cfg.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank);
  }
  EMBER_CHECK(!cfg.data_on_device || r.device.is_cuda(), "--data-on-device needs a CUDA device, and --device ",
              cfg.device, " is ", r.device);
  if (r.device.is_cuda()) {
    // Batches arrive on the device: pinned, copied on the loader's copy stream (loader.h), or
    // made there from the resident dataset (Note [Data on the device]).
    train_options.device = r.device;
    train_options.data_on_device = cfg.data_on_device;
    train_options.pin_memory = cfg.data_on_device ? data::PinMemory::off : data::PinMemory::on;
  }
  r.loader = std::make_unique<data::DataLoader>(d.train, train_options);
  // Evaluation batches are as large as training batches (halved on out of memory: with_eval_backoff).
  r.eval_batch = cfg.batch_size;
  r.test_loader = make_test_loader(cfg, d, r.eval_batch);
  r.steps_per_epoch = r.loader->size();

  // Model: the same seed gives the same initial weights.
  manual_seed(cfg.seed);
  models::ModelSpec spec{.name = cfg.model, .in_channels = d.channels, .image_size = d.image_size,
                         .num_classes = static_cast<int64_t>(d.classes.size())};
  r.model = models::create_model(spec);
  if (!cfg.init_weights.empty() && cfg.finetune) {
    // PyTorch weights without their classifier (Note [Fine-tuning] in train/finetune.h).
    const int64_t loaded = load_pytorch_weights(*r.model, cfg.model, cfg.init_weights, true);
    if (!cfg.quiet && r.lead)
      std::fprintf(stderr, "ember train: fine-tuning from %s (%lld tensors); a new classifier '%s' for %zu classes%s\n",
                   printable(cfg.init_weights).c_str(), static_cast<long long>(loaded), models::classifier_name(cfg.model).c_str(),
                   d.classes.size(), cfg.freeze_backbone ? ", the backbone frozen" : "");
  } else if (!cfg.init_weights.empty()) {
    load_weights_into(*r.model, cfg.init_weights);
  }
  // Initialized on the CPU and then moved, so a seed gives the same weights on every device.
  r.model->to(r.device);
  // Before the optimizer takes the parameters: to(MemoryFormat) replaces the 4-D ones.
  if (cfg.channels_last) r.model->to(MemoryFormat::channels_last);
  if (cfg.freeze_backbone) freeze_backbone(*r.model, cfg.model);
  r.optimizer = make_optimizer(cfg, param_groups(cfg, *r.model));
  r.scheduler = make_scheduler(cfg, *r.optimizer, r.steps_per_epoch);
  if (cfg.amp != "off") r.amp_dtype = cfg.amp == "fp16" ? DType::f16 : DType::bf16;
  optim::GradScalerOptions scaling{.enabled = cfg.amp == "fp16"};
  // EMBER_FAULT=amp-growth-interval:N (a testing hook): S doubles after N clean steps instead of
  // 2000, so that a short fp16 run overflows, and skips steps, again and again.
  if (const int64_t n = io::fault_value("amp-growth-interval"); n > 0) scaling.growth_interval = n;
  r.scaler = std::make_unique<optim::GradScaler>(scaling);

  // Before the first step: one evaluation batch (so that an evaluation that does not fit fails or
  // shrinks now, not after an epoch of work) and the output paths.
  r.cfg = cfg;  // with_eval_backoff reads it
  if (r.test_loader->size() > 0) {
    with_eval_backoff(r, [&] {
      NoGradGuard no_grad;
      const bool was_training = r.model->is_training();
      r.model->eval();
      data::Batch batch = r.test_loader->load_batch(0, 0);
      if (batch.labels.numel() > 0) (void)r.model->forward(batch.images.to(r.device));
      r.model->train(was_training);
      return 0;
    });
  }
  const std::vector<std::string> run_dirs{cfg.save_dir, cfg.resume_dir};
  if (r.lead && !cfg.save_weights.empty()) check_output_file("--save-weights", cfg.save_weights, run_dirs);
  if (r.lead && !cfg.profile_trace.empty())
    check_output_file("--profile-trace", cfg.profile_trace, run_dirs, "trace.json");
  // --metrics naming the run directory's own stream is that stream, written once.
  const fs::path stream = fs::path(cfg.save_dir) / kMetricsFileName;
  if (!cfg.metrics_path.empty() && !cfg.save_dir.empty() && same_path(cfg.metrics_path, stream.string()))
    cfg.metrics_path.clear();
  if (r.lead && !cfg.metrics_path.empty()) check_output_path("--metrics", cfg.metrics_path, run_dirs);
  const bool continuing = resumed && fs::exists(cfg.save_dir) && fs::equivalent(cfg.save_dir, cfg.resume_dir);
  if (r.lead && !cfg.save_dir.empty())
    r.checkpoint = std::make_unique<CheckpointWriter>(cfg.save_dir, r.run_id, cfg.overwrite, continuing);

  if (resume_state) {
    load_weights_into(*r.model, resume_reader->path(resumed->weights));
    restore_training_state(*resume_state, *r.optimizer, r.scheduler.get(), *r.scaler, *r.loader, r.step,
                           r.start_epoch);
    r.best_acc = resumed->has_best ? resumed->best_acc : -1;
  }
  // Batch statistics over every rank's images (a model without BatchNorm is left as it is).
  if (r.distributed && cfg.sync_bn) parallel::convert_sync_batchnorm(*r.model, r.comm);
  // Every rank checks that the others built the same model, then starts from rank 0's weights.
  if (r.distributed) r.ddp = std::make_unique<parallel::DistributedDataParallel>(*r.model, r.comm);

  r.metrics = std::make_unique<MetricsWriter>(cfg.metrics_path);
  if (r.lead && !cfg.save_dir.empty()) {
    // The run directory's own metrics stream, for `ember report` (train/run_report.h), opened
    // under the directory's lock (Note [The metrics stream] in train/report.h): a run continued in
    // its directory appends to it; a new run writes its own beside an earlier run's, which it
    // replaces at its first save (the earlier evaluation.json and report.html go then too).
    std::error_code ec;
    const bool earlier = fs::symlink_status(stream, ec).type() != fs::file_type::not_found;
    r.run_metrics = std::make_unique<MetricsWriter>(
        stream.string(), continuing ? MetricsOpen::append : earlier ? MetricsOpen::replace : MetricsOpen::truncate);
  }
  json config = config_json(cfg, d, r.steps_per_epoch);
  config["environment"] = json::parse(environment_json());
  write_metrics(r, config.dump());
  r.progress = Progress(cfg.quiet);
  r.criterion = std::make_unique<nn::CrossEntropyLoss>(CrossEntropyOptions{.label_smoothing = cfg.label_smoothing});
  r.cfg = std::move(cfg);
  if (r.cfg.profile || !r.cfg.profile_trace.empty()) r.profiler = std::make_unique<profiler::Profiler>();
  r.metrics_enabled = r.metrics->enabled() || r.run_metrics != nullptr;
  r.guard = std::make_unique<StepGuard>(r.device);
  r.optimizer->set_skip_flag(r.guard->flag());
  // The objects the step uses are owned through pointers, so they stay where they are when the
  // Run is moved.
  r.train_step = std::make_unique<TrainStep>(TrainStep::Parts{
      .model = r.model.get(), .criterion = r.criterion.get(), .optimizer = r.optimizer.get(), .scaler = r.scaler.get(),
      .guard = r.guard.get(), .ddp = r.ddp.get(), .amp = r.amp_dtype, .device = r.device,
      .input_format = model_input_format(r.cfg), .clip_grad_norm = r.cfg.clip_grad_norm});
  if (r.cfg.cuda_graphs) {
    EMBER_CHECK(!r.distributed, "--cuda-graphs cannot be used with several processes: the gradient all-reduce "
                "synchronizes with the host, which a CUDA graph cannot record");
    r.graphed = std::make_unique<GraphedStep>(r.device, static_cast<int64_t>(r.d.classes.size()), *r.train_step);
  }
  return r;
}

// The steps of one epoch (or of its remainder, after a resume), until the loader's epoch ends or
// --max-steps is reached. Returns this process's sums.
EpochTotals train_one_epoch(Run& r, int epoch) {
  const TrainConfig& cfg = r.cfg;
  data::DataLoader& loader = *r.loader;
  optim::Optimizer& opt = *r.optimizer;
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
  for (auto& [host_images, host_labels] : loader) {
    if (host_labels.numel() == 0) {  // every file of the batch was unreadable and skipped
      // Every rank must take part in each step's gradient all-reduce: no step can be left out.
      EMBER_CHECK(!r.distributed, "every image of a batch was unreadable (--skip-bad-images); with several "
                  "processes a step cannot be skipped: remove the files (ember inspect lists them)");
      continue;
    }
    r.epoch_now = epoch;
    const profiler::Scope step_scope("step", profiler::Phase::step);
    // EMBER_FAULT=slow-step-ms:N (a testing hook): the whole N ms, even across a signal.
    if (const int64_t ms = io::fault_value("slow-step-ms"); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const int64_t n = host_labels.size(0);
    const double lr_used = opt.get_lr(0);
    // A step event reads the guard: only when a metrics stream takes it.
    const bool step_event = (r.step + 1) % cfg.log_every == 0 && r.metrics_enabled;
    bool interrupt = interrupt_requested();
    if (r.graphed && r.graphed->replays(host_images, host_labels)) {
      // --cuda-graphs (Note [Training with CUDA graphs] in train/graph_step.h): the whole step,
      // the guard's record included, is one replay.
      const bool capture = r.graphed->node_count() == 0;
      r.graphed->run(host_images, host_labels);
      if (capture && r.lead && !cfg.quiet)
        std::fprintf(stderr, "ember train: --cuda-graphs: step %lld captured as a CUDA graph of %zu nodes; every full "
                     "batch replays it\n", static_cast<long long>(r.step + 1), r.graphed->node_count());
    } else {
      Tensor images, labels;
      {
        const profiler::Scope scope("to device", profiler::Phase::data);
        images = host_images.to(r.device).contiguous(model_input_format(r.cfg));
        labels = host_labels.to(r.device);
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
      const TrainStep::Outputs out = r.train_step->run(images, labels, StepMode::eager, r.step + 1,
                                                       r.distributed ? TrainStep::BeforeUpdate(agree_to_stop) : nullptr);
      // --cuda-graphs: the first full batch that updated the optimizer is the warm-up; the next
      // one of its shapes is captured (Note [Training with CUDA graphs]).
      if (r.graphed && n == cfg.batch_size && out.stepped) r.graphed->eager_step_done(host_images, host_labels);
    }
    if (r.scheduler) r.scheduler->step();
    ++r.step;
    t.seen += n;
    const double ips = static_cast<double>(t.seen) / std::max(1e-9, seconds_since(t.started));
    const int64_t shown = loader.position().batch == 0 ? r.steps_per_epoch : loader.position().batch;
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
      break;
    }
    if (interrupt) {
      r.stopped = r.interrupted = true;
      break;
    }
  }
  const StepGuard::Totals g = read_guard(r);
  t.loss_sum = g.loss_sum;
  t.correct = static_cast<int64_t>(g.correct);
  r.progress.end_epoch();
  return t;
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
    r.checkpoint->save(cfg, r.d, *r.model,
                       make_training_state(cfg, r.d, *r.optimizer, r.scheduler.get(), *r.scaler, *r.loader,
                                           r.step, epoch_done ? epoch + 1 : epoch, r.run_id));
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
// processes (the other ranks cannot join a save begun by one rank's failure), or when nothing
// was trained since the last save. With --skip-bad-images the file is left out and reported at
// the end of the epoch instead, whenever it went bad.
[[noreturn]] void stop_at_bad_file(Run& r, int epoch, const data::BadImageError& e) {
  const int64_t saved_step = r.checkpoint && r.checkpoint->saved() ? r.checkpoint->step() : 0;
  if (r.checkpoint && !r.distributed && r.step > saved_step) {
    read_guard(r);  // a divergence since the last read is the error to report, and is not saved
    if (parameters_finite(*r.model)) {
      r.checkpoint->save(r.cfg, r.d, *r.model,
                         make_training_state(r.cfg, r.d, *r.optimizer, r.scheduler.get(), *r.scaler, *r.loader, r.step,
                                             epoch, r.run_id));
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
  summary.seconds = seconds_since(t_start);
  summary.images_per_sec = static_cast<double>(r.train_images) / std::max(1e-9, r.train_seconds);
  write_metrics(r, json{{"event", "summary"}, {"test_acc", std::isnan(summary.test_acc) ? json() : json(summary.test_acc)},
                        {"test_loss", std::isnan(summary.test_loss) ? json() : json(summary.test_loss)},
                        {"images_per_sec", summary.images_per_sec}, {"seconds", summary.seconds}, {"steps", r.step},
                        {"interrupted", r.interrupted}}
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
    char span[96];
    if (summary.stopped_early)
      std::snprintf(span, sizeof span, "stopped by --max-steps at step %lld in epoch %d of %d",
                    static_cast<long long>(r.step), r.epoch_now + 1, cfg.epochs);
    else
      std::snprintf(span, sizeof span, "%d epochs", cfg.epochs);
    std::printf("ember train: %s on %s, %s%s, test accuracy %.2f%%, %.0f images/s, %s\n", cfg.model.c_str(),
                printable(cfg.data).c_str(), span, procs.c_str(), 100 * summary.test_acc, summary.images_per_sec,
                format_duration(summary.seconds).c_str());
  }
  print_saved();
  return summary;
}

}  // namespace

TrainSummary run_training(TrainConfig cfg) {
  const auto t_start = std::chrono::steady_clock::now();
  const InterruptHandlers handlers(!cfg.quiet);
  Run run = start_run(std::move(cfg));
  run.model->train();
  if (run.start_epoch >= run.cfg.epochs) {
    if (!run.cfg.quiet && run.lead)
      std::fprintf(stderr, "ember train: the run in %s is complete (step %lld, %d epochs); give --epochs above %d "
                   "to train it further\n", printable(run.cfg.resume_dir).c_str(), static_cast<long long>(run.step),
                   run.cfg.epochs, run.cfg.epochs);
    run.summary.steps = run.step;
    run.summary.epochs_run = run.cfg.epochs;
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
