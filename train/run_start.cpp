// start_run: everything `ember train` builds before its first step, in the order it is built
// (Note [Run directory ownership] in train/run_dir.h says what the checks on --save protect).

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../core/autograd.h"
#include "../core/cpu/parallel.h"
#include "../core/generator.h"
#include "../data/dataset.h"
#include "../data/image_dataset.h"
#include "../data/transforms.h"
#include "../io/atomic_file.h"
#include "../io/fault.h"
#include "../io/training_state.h"
#include "../models/zoo.h"
#include "../parallel/sync_batchnorm.h"
#include "finetune.h"
#include "run.h"
#include "run_dir.h"
#include "run_report.h"
#include "run_setup.h"
#include "terminal_text.h"
#include "train_step.h"
#include "weights.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

void write_metrics(Run& r, const std::string& line) {
  r.metrics->write_line(line);
  if (r.run_metrics) r.run_metrics->write_line(line);
}

bool is_out_of_memory(const Error& e) { return std::string(e.what()).find("out of memory") != std::string::npos; }

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

io::TrainingState run_training_state(const Run& r, int64_t epochs_completed) {
  io::TrainingState st = make_training_state(r.cfg, r.d, *r.optimizer, r.scheduler.get(), *r.scaler, *r.loader, r.step,
                                             epochs_completed, r.run_id);
  if (r.plateau)
    for (const auto& [key, value] : r.plateau->state_dict()) st.extra["plateau." + key] = value;
  if (r.early_stop) {
    for (const auto& [key, value] : r.early_stop->state_dict()) st.extra["early_stop." + key] = value;
    st.extra["early_stop.stopped"] = r.stopped_early ? 1.0 : 0.0;
  }
  return st;
}

void restore_watchers(Run& r, const io::TrainingState& st) {
  const auto saved = [&](const std::string& prefix) {
    std::map<std::string, double> out;
    for (const auto& [key, value] : st.extra)
      if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = io::state_get<double>(st.extra, key);
    EMBER_CHECK(!out.empty(), "--resume: the training state has no '", prefix, "*' extras, which a run with --",
                prefix == "plateau." ? "scheduler plateau" : "early-stop-patience", " saves");
    return out;
  };
  if (r.plateau) r.plateau->load_state_dict(saved("plateau."));
  if (r.early_stop) {
    std::map<std::string, double> s = saved("early_stop.");
    r.stopped_early = s["stopped"] != 0;
    s.erase("stopped");
    r.early_stop->load_state_dict(s);
  }
}

namespace {

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

bool given(const TrainConfig& cfg, const char* name) {
  return std::find(cfg.explicitly_set.begin(), cfg.explicitly_set.end(), name) != cfg.explicitly_set.end();
}

// One process, or one rank of an mpirun / srun job (docs/distributed.md): the communicator, and
// what a rank other than 0 does not do.
void join_ranks(Run& r, TrainConfig& cfg) {
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
}

// The checkpoint a --resume run continues: its files checked and kept in place (a run still
// writing there removes nothing a reader holds) until the weights are loaded.
struct Resumed {
  std::optional<CheckpointReader> reader;
  std::optional<Manifest> manifest;
  std::optional<io::TrainingState> state;
  std::vector<std::string> changed;  // the options given that change the saved configuration
  bool continuing = false;            // the run saves into the directory it resumes from
};

// With --resume, the run continues with the configuration it was started with (--epochs may extend
// it) and keeps its id; otherwise a new id.
void open_resume(Run& r, TrainConfig& cfg, Resumed& res) {
  if (cfg.resume_dir.empty()) {
    r.run_id = new_run_id();
    return;
  }
  EMBER_CHECK(std::filesystem::is_directory(cfg.resume_dir), "--resume: checkpoint directory '", cfg.resume_dir,
              "' does not exist");
  EMBER_CHECK(has_checkpoint(cfg.resume_dir), "--resume: '", cfg.resume_dir, "' holds no checkpoint (no ",
              kManifestName, "; nothing was saved there, or it was written by an older ember)");
  res.reader.emplace(cfg.resume_dir);
  res.manifest = res.reader->manifest();
  res.state = io::load_training_state(res.reader->path(res.manifest->state));
  apply_saved_config(*res.state, cfg, res.changed);
  r.run_id = res.manifest->run;
  // Resuming keeps saving into the same directory.
  if (cfg.save_dir.empty()) cfg.save_dir = cfg.resume_dir;
  res.continuing = fs::exists(cfg.save_dir) && fs::equivalent(cfg.save_dir, cfg.resume_dir);
}

// The --save and --save-weights checks that need no data, before the data is read
// (CheckpointWriter checks the rest), and what the run says before it starts.
void check_before_data(const Run& r, const TrainConfig& cfg, const Resumed& res) {
  if (r.lead && !cfg.save_dir.empty()) {
    EMBER_CHECK(!fs::exists(cfg.save_dir) || fs::is_directory(cfg.save_dir), "--save: '", cfg.save_dir,
                "' is a file, not a directory");
    EMBER_CHECK(res.continuing || cfg.overwrite || !has_checkpoint(cfg.save_dir), "--save: '", cfg.save_dir,
                "' already holds a checkpoint; continue it with --resume ", cfg.save_dir,
                ", or pass --overwrite to replace it with this run");
    // What ember may not touch there is refused now; CheckpointWriter looks again under the lock.
    survey_run_dir(cfg.save_dir, res.continuing   ? RunDirUse::continuing
                                 : cfg.overwrite  ? RunDirUse::overwrite
                                                  : RunDirUse::new_run);
  }
  if (r.lead && !cfg.save_weights.empty())
    EMBER_CHECK(!fs::is_directory(cfg.save_weights), "--save-weights '", cfg.save_weights,
                "' is a directory; name a file in it, e.g. '", (fs::path(cfg.save_weights) / "model.safetensors").string(),
                "'");
  if (given(cfg, "momentum") && cfg.optimizer != "sgd" && !cfg.quiet && r.lead)
    std::fprintf(stderr, "ember train: warning: --momentum applies to --optimizer sgd only; %s ignores it\n",
                 cfg.optimizer.c_str());
  if (res.manifest && !cfg.quiet && r.lead) {
    std::string s;
    for (const std::string& x : res.changed) s += (s.empty() ? "" : ", ") + x;
    std::fprintf(stderr, "ember train: resuming run %s from %s at step %lld (%lld epoch(s) done)%s%s\n",
                 res.manifest->run.c_str(), printable(cfg.resume_dir).c_str(),
                 static_cast<long long>(res.manifest->step), static_cast<long long>(res.manifest->epoch),
                 s.empty() ? "" : "; changed: ", s.c_str());
  }
}

// The data (first, so that a missing dataset is the only thing printed), and the training and
// evaluation loaders.
void open_loaders(Run& r, const TrainConfig& cfg, const Resumed& res, const std::vector<std::string>& chose) {
  r.d = open_data(cfg.data, cfg.data_dir,
                  {.val = cfg.val, .val_split = cfg.val_split, .image_size = cfg.image_size,
                   .cache_dir = cfg.cache_dir, .skip_bad_images = cfg.skip_bad_images, .seed = cfg.seed});
  const DataInfo& d = r.d;
  if (res.state) check_resumed_data(*res.state, d);  // the data it was saved with (Note [Held-out split])
  if (d.kind != DataKind::image_folder)
    for (const char* name : {"val", "val-split", "image-size", "cache", "skip-bad-images"})
      EMBER_CHECK(!given(cfg, name), "--", name, " applies to ImageFolder data only, and '", cfg.data, "' holds ",
                  is_cifar_dir(d.dir) ? "CIFAR batches" : "IDX files", " (docs/data.md)");
  if (!cfg.quiet && !chose.empty() && !res.manifest) {
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
    const int rank = r.comm->rank();
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
  // A resident dataset's batches gather labels already on the device: its labels are checked
  // once, here, as every host batch's are before its copy (check_class_indices).
  if (const auto* resident = dynamic_cast<const data::TensorDataset*>(d.train.get()); resident && cfg.data_on_device)
    check_class_indices(resident->labels().to(DType::i64), static_cast<int64_t>(d.classes.size()));
  r.loader = std::make_unique<data::DataLoader>(d.train, train_options);
  // Evaluation batches are as large as training batches (halved on out of memory: with_eval_backoff).
  r.eval_batch = cfg.batch_size;
  r.test_loader = make_test_loader(cfg, d, r.eval_batch);
  // Optimizer steps: --accum-steps K takes the loader's batches K at a time.
  r.steps_per_epoch = (r.loader->size() + cfg.accum_steps - 1) / cfg.accum_steps;
}

// The model (the same seed gives the same initial weights), its starting weights, the optimizer,
// the schedule and the loss scaler.
// One evaluation batch before the first step, so that an evaluation that does not fit fails or
// shrinks now, not after an epoch of work.
void try_one_eval_batch(Run& r) {
  if (r.test_loader->size() == 0) return;
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

// The output paths checked, and the checkpoint writer (under the directory's lock).
void open_outputs(Run& r, TrainConfig& cfg, const Resumed& res) {
  const std::vector<std::string> run_dirs{cfg.save_dir, cfg.resume_dir};
  if (r.lead && !cfg.save_weights.empty()) check_output_file("--save-weights", cfg.save_weights, run_dirs);
  if (r.lead && !cfg.profile_trace.empty())
    check_output_file("--profile-trace", cfg.profile_trace, run_dirs, "trace.json");
  // --metrics naming the run directory's own stream is that stream, written once.
  const fs::path stream = fs::path(cfg.save_dir) / kMetricsFileName;
  if (!cfg.metrics_path.empty() && !cfg.save_dir.empty() && same_path(cfg.metrics_path, stream.string()))
    cfg.metrics_path.clear();
  if (r.lead && !cfg.metrics_path.empty()) check_output_path("--metrics", cfg.metrics_path, run_dirs);
  if (r.lead && !cfg.save_dir.empty())
    r.checkpoint = std::make_unique<CheckpointWriter>(cfg.save_dir, r.run_id, cfg.overwrite, res.continuing);
}

// The metrics streams, and the run's config event in them.
void open_metrics(Run& r, const TrainConfig& cfg, const Resumed& res) {
  const fs::path stream = fs::path(cfg.save_dir) / kMetricsFileName;
  r.metrics = std::make_unique<MetricsWriter>(cfg.metrics_path);
  if (r.lead && !cfg.save_dir.empty()) {
    // The run directory's own metrics stream, for `ember report` (train/run_report.h), opened
    // under the directory's lock (Note [The metrics stream] in train/report.h): a run continued in
    // its directory appends to it; a new run writes its own beside an earlier run's, which it
    // replaces at its first save (the earlier evaluation.json and report.html go then too).
    std::error_code ec;
    const bool earlier = fs::symlink_status(stream, ec).type() != fs::file_type::not_found;
    r.run_metrics = std::make_unique<MetricsWriter>(
        stream.string(), res.continuing ? MetricsOpen::append : earlier ? MetricsOpen::replace : MetricsOpen::truncate);
  }
  r.metrics_enabled = r.metrics->enabled() || r.run_metrics != nullptr;
  json config = config_json(cfg, r.d, r.steps_per_epoch);
  config["environment"] = json::parse(environment_json());
  write_metrics(r, config.dump());
}

}  // namespace

void build_model(Run& r, const TrainConfig& cfg) {
  const DataInfo& d = r.d;
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
  r.plateau = make_plateau(cfg, *r.optimizer);
  if (cfg.early_stop_patience > 0)
    r.early_stop = std::make_unique<EarlyStopping>(
        cfg.early_stop_metric.ends_with("_acc") ? EarlyStopping::Mode::max : EarlyStopping::Mode::min,
        cfg.early_stop_patience);
  if (cfg.amp != "off") r.amp_dtype = cfg.amp == "fp16" ? DType::f16 : DType::bf16;
  optim::GradScalerOptions scaling{.enabled = cfg.amp == "fp16"};
  // EMBER_FAULT=amp-growth-interval:N (a testing hook): S doubles after N clean steps instead of
  // 2000, so that a short fp16 run overflows, and skips steps, again and again.
  if (const int64_t n = io::fault_value("amp-growth-interval"); n > 0) scaling.growth_interval = n;
  r.scaler = std::make_unique<optim::GradScaler>(scaling);
}

// The step, eager and captured alike (Note [One training step] in train/train_step.h). The
// objects it uses are owned through pointers, so they stay where they are when the Run is moved.
void build_step(Run& r) {
  r.criterion = std::make_unique<nn::CrossEntropyLoss>(CrossEntropyOptions{.label_smoothing = r.cfg.label_smoothing});
  r.guard = std::make_unique<StepGuard>(r.device);
  r.optimizer->set_skip_flag(r.guard->flag());
  r.train_step = std::make_unique<TrainStep>(TrainStep::Parts{
      .model = r.model.get(), .criterion = r.criterion.get(), .optimizer = r.optimizer.get(), .scaler = r.scaler.get(),
      .guard = r.guard.get(), .ddp = r.ddp.get(), .amp = r.amp_dtype, .device = r.device,
      .input_format = model_input_format(r.cfg), .clip_grad_norm = r.cfg.clip_grad_norm});
  if (r.cfg.cuda_graphs) {
    EMBER_CHECK(!r.distributed, "--cuda-graphs cannot be used with several processes: the gradient all-reduce "
                "synchronizes with the host, which a CUDA graph cannot record");
    r.graphed = std::make_unique<GraphedStep>(r.device, static_cast<int64_t>(r.d.classes.size()), *r.train_step);
  }
}

Run start_run(TrainConfig cfg) {
  Run r;
  join_ranks(r, cfg);
  Resumed res;
  open_resume(r, cfg, res);
  const std::vector<std::string> chose = resolve(cfg);
  validate(cfg);
  check_before_data(r, cfg, res);
  r.device = resolve_device(cfg.device);
  if (cfg.threads > 0) set_num_threads(cfg.threads);
  open_loaders(r, cfg, res, chose);
  // What --scheduler plateau and --early-stop-patience watch, checked before the first step.
  if (cfg.scheduler == "plateau" || cfg.early_stop_patience > 0)
    resolve_monitored(cfg, r.d.split.has_value() || !cfg.val.empty());
  build_model(r, cfg);
  r.cfg = cfg;  // with_eval_backoff reads it
  try_one_eval_batch(r);
  open_outputs(r, cfg, res);
  if (res.state) {
    load_weights_into(*r.model, res.reader->path(res.manifest->weights));
    restore_training_state(*res.state, *r.optimizer, r.scheduler.get(), *r.scaler, *r.loader, r.step, r.start_epoch);
    restore_watchers(r, *res.state);
    r.best_acc = res.manifest->has_best ? res.manifest->best_acc : -1;
    // Checkpoints are written between optimizer steps: with --accum-steps K, at a multiple of K.
    const int64_t at = r.loader->position().batch;
    EMBER_CHECK(at % cfg.accum_steps == 0, "--resume: the checkpoint in '", cfg.resume_dir, "' stands at batch ", at,
                " of its epoch, inside a step of --accum-steps ", cfg.accum_steps, "; it cannot continue exactly");
  }
  // Batch statistics over every rank's images (a model without BatchNorm is left as it is).
  if (r.distributed && cfg.sync_bn) parallel::convert_sync_batchnorm(*r.model, r.comm);
  // Every rank checks that the others built the same model, then starts from rank 0's weights.
  if (r.distributed) r.ddp = std::make_unique<parallel::DistributedDataParallel>(*r.model, r.comm);
  open_metrics(r, cfg, res);
  r.progress = Progress(cfg.quiet);
  r.cfg = std::move(cfg);
  if (r.cfg.profile || !r.cfg.profile_trace.empty()) r.profiler = std::make_unique<profiler::Profiler>();
  build_step(r);
  return r;
}

}  // namespace ember::train
