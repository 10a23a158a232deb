// Datasets, transforms and checkpoint files for the trainer.

#include "checkpoint.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../data/cifar.h"
#include "../data/idx.h"
#include "../data/image.h"
#include "../data/image_transforms.h"
#include "../io/safetensors.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../models/zoo.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- data ---------------------------------------------------------------------------------------

void channel_stats(const Tensor& images, std::vector<double>& mean, std::vector<double>& std) {
  const int64_t n = images.size(0), c = images.size(1), hw = images.size(2) * images.size(3);
  const auto* p = static_cast<const uint8_t*>(images.contiguous().data());
  mean.assign(c, 0);
  std.assign(c, 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = p + (i * c + ch) * hw;
      int64_t rs = 0, rs2 = 0;  // exact integer sums per image
      for (int64_t j = 0; j < hw; ++j) {
        rs += row[j];
        rs2 += static_cast<int64_t>(row[j]) * row[j];
      }
      s += static_cast<double>(rs);
      s2 += static_cast<double>(rs2);
    }
    const double count = static_cast<double>(n * hw);
    const double m = s / count / 255.0;
    mean[ch] = m;
    std[ch] = std::sqrt(std::max(0.0, s2 / count / (255.0 * 255.0) - m * m));
  }
}

bool is_cifar_dir(const std::string& dir) {
  return fs::exists(fs::path(dir) / "data_batch_1.bin") || fs::exists(fs::path(dir) / "train.bin");
}

namespace {
bool is_idx_dir(const std::string& dir) {
  for (const char* name : {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte",
                           "t10k-images-idx3-ubyte.gz"})
    if (fs::exists(fs::path(dir) / name)) return true;
  return false;
}
}  // namespace

DataInfo open_data(const std::string& data, const std::string& data_dir, const ImageDataOptions& image) {
  DataInfo d;
  std::shared_ptr<const data::InMemoryImageDataset> train, test;
  if (data == "fashion-mnist") {
    d.dir = data_dir.empty() ? data::default_fashion_mnist_dir().string() : data_dir;
    train = std::make_shared<data::InMemoryImageDataset>(data::fashion_mnist(d.dir, data::Split::train));
    test = std::make_shared<data::InMemoryImageDataset>(data::fashion_mnist(d.dir, data::Split::test));
  } else {
    // mnist, or a directory: IDX files, CIFAR batches, or an ImageFolder tree
    d.dir = data == "mnist" ? data_dir : (data_dir.empty() ? data : data_dir);
    EMBER_CHECK(!d.dir.empty(), "--data mnist needs --data-dir DIR (the directory with the MNIST IDX files)");
    EMBER_CHECK(fs::is_directory(d.dir), "data directory '", d.dir, "' does not exist or is not a directory");
    if (data != "mnist" && is_cifar_dir(d.dir)) {
      const bool c10 = fs::exists(fs::path(d.dir) / "data_batch_1.bin");
      train = std::make_shared<data::InMemoryImageDataset>(c10 ? data::cifar10(d.dir, data::Split::train)
                                                               : data::cifar100(d.dir, data::Split::train));
      test = std::make_shared<data::InMemoryImageDataset>(c10 ? data::cifar10(d.dir, data::Split::test)
                                                              : data::cifar100(d.dir, data::Split::test));
    } else if (data == "mnist" || is_idx_dir(d.dir)) {
      train = std::make_shared<data::InMemoryImageDataset>(data::mnist(d.dir, data::Split::train));
      test = std::make_shared<data::InMemoryImageDataset>(data::mnist(d.dir, data::Split::test));
    } else {
      return open_image_folder(d.dir, image);
    }
  }
  d.train = train;
  d.test = test;
  d.classes = train->classes();
  if (d.classes.empty())  // no names in the files: the label numbers
    for (int64_t i = 0, n = static_cast<int64_t>(max(train->labels()).item()) + 1; i < n; ++i)
      d.classes.push_back(std::to_string(i));
  d.channels = train->channels();
  EMBER_CHECK(train->height() == train->width(), "images must be square, got ", train->height(), "x",
              train->width());
  d.image_size = train->height();
  channel_stats(train->images(), d.mean, d.std);
  return d;
}

data::Compose image_eval_transform(int64_t resize, int64_t image_size, bool cached, const std::vector<double>& mean,
                                   const std::vector<double>& std) {
  std::vector<data::AnyTransform> t;
  if (!cached) {
    if (resize > 0) t.push_back(data::Resize(resize));
    t.push_back(data::CenterCrop(image_size));
  } else {
    t.push_back(data::CenterCrop(image_size));
  }
  t.push_back(data::ToTensor());
  t.push_back(data::Normalize(mean, std));
  return data::Compose(t);
}

data::Compose make_train_transform(const DataInfo& d, bool flip) {
  std::vector<data::AnyTransform> t;
  if (d.kind == DataKind::image_folder) {
    // torchvision's ImageNet training recipe; with the cache, the crop is taken from the image
    // pre-resized to `resize` (docs/data.md).
    t.push_back(data::RandomResizedCrop(d.image_size));
    t.push_back(data::RandomHorizontalFlip(0.5));
  } else {
    t.push_back(data::RandomCrop(d.image_size, d.image_size, 2));
    if (flip) t.push_back(data::RandomHorizontalFlip(0.5));
  }
  t.push_back(data::ToTensor());
  t.push_back(data::Normalize(d.mean, d.std));
  return data::Compose(t);
}

data::Compose make_eval_transform(const DataInfo& d) {
  if (d.kind == DataKind::image_folder) return image_eval_transform(d.resize, d.image_size, d.cached, d.mean, d.std);
  return data::Compose{data::ToTensor(), data::Normalize(d.mean, d.std)};
}

// ---- weights files ------------------------------------------------------------------------------

CheckpointPaths checkpoint_paths(const std::string& dir) {
  const fs::path p(dir);
  return {(p / "last.safetensors").string(), (p / "last.state.safetensors").string(), (p / "best.safetensors").string()};
}

void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d) {
  std::map<std::string, std::string> meta{
      {"format", "pt"},  // what safetensors.torch.save_file writes
      {"ember.model", cfg.model},
      {"ember.in_channels", std::to_string(d.channels)},
      {"ember.image_size", std::to_string(d.image_size)},
      {"ember.resize", std::to_string(d.resize)},
      {"ember.classes", json(d.classes).dump()},
      {"ember.mean", json(d.mean).dump()},
      {"ember.std", json(d.std).dump()},
  };
  io::save_safetensors(path, model.state_dict(), meta);
}

void load_weights_into(nn::Module& model, const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  try {
    model.load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
}

LoadedModel load_model(const std::string& checkpoint) {
  std::string path = checkpoint;
  if (fs::is_directory(checkpoint)) {
    const CheckpointPaths p = checkpoint_paths(checkpoint);
    path = fs::exists(p.best) ? p.best : p.weights;
  }
  EMBER_CHECK(fs::exists(path), "checkpoint '", path, "' does not exist");
  io::SafetensorsFile f = io::load_safetensors(path);
  auto need = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    EMBER_CHECK(it != f.metadata.end(), path, ": not an ember weights file (no '", key,
                "' in its metadata); train with ember or pass --init-weights with --model");
    return it->second;
  };
  LoadedModel m;
  try {
    m.model_name = need("ember.model");
    m.in_channels = std::stoll(need("ember.in_channels"));
    m.image_size = std::stoll(need("ember.image_size"));
    if (auto it = f.metadata.find("ember.resize"); it != f.metadata.end()) m.resize = std::stoll(it->second);
    m.classes = json::parse(need("ember.classes")).get<std::vector<std::string>>();
    m.mean = json::parse(need("ember.mean")).get<std::vector<double>>();
    m.std = json::parse(need("ember.std")).get<std::vector<double>>();
  } catch (const json::exception& e) {
    EMBER_THROW(path, ": invalid ember metadata: ", e.what());
  } catch (const std::invalid_argument&) {
    EMBER_THROW(path, ": invalid ember metadata (a number was expected)");
  }
  m.model = models::create_model({.name = m.model_name, .in_channels = m.in_channels, .image_size = m.image_size,
                                  .num_classes = static_cast<int64_t>(m.classes.size())});
  try {
    m.model->load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
  m.model->eval();
  return m;
}

// ---- training checkpoints ---------------------------------------------------------------------

namespace {
std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips exactly
  return buf;
}
}  // namespace

void save_checkpoint(const TrainConfig& cfg, const DataInfo& d, const nn::Module& model, const optim::Optimizer& opt,
                     const optim::LRScheduler* sched, const data::DataLoader& loader, int64_t step,
                     int64_t epochs_completed, double best_acc, bool is_best) {
  std::error_code ec;
  fs::create_directories(cfg.save_dir, ec);
  EMBER_CHECK(!ec && fs::is_directory(cfg.save_dir), "--save: cannot create directory '", cfg.save_dir, "': ",
              ec.message());
  const CheckpointPaths p = checkpoint_paths(cfg.save_dir);
  io::TrainingState st;
  st.model_name = cfg.model;
  st.model_config = {{"model", cfg.model},
                     {"data", cfg.data},
                     {"data_dir", cfg.data_dir},
                     {"epochs", std::to_string(cfg.epochs)},
                     {"batch_size", std::to_string(cfg.batch_size)},
                     {"lr", fmt(cfg.lr)},
                     {"optimizer", cfg.optimizer},
                     {"momentum", fmt(cfg.momentum)},
                     {"weight_decay", fmt(cfg.weight_decay)},
                     {"scheduler", cfg.scheduler},
                     {"warmup_epochs", fmt(cfg.warmup_epochs)},
                     {"label_smoothing", fmt(cfg.label_smoothing)},
                     {"augment", cfg.augment ? "1" : "0"},
                     {"shuffle", cfg.shuffle ? "1" : "0"},
                     {"seed", std::to_string(cfg.seed)},
                     {"val", cfg.val},
                     {"val_split", fmt(cfg.val_split)},
                     {"image_size_option", std::to_string(cfg.image_size)},
                     {"cache_dir", cfg.cache_dir},
                     {"skip_bad_images", cfg.skip_bad_images ? "1" : "0"},
                     {"in_channels", std::to_string(d.channels)},
                     {"image_size", std::to_string(d.image_size)},
                     {"world_size", std::to_string(cfg.world_size)},
                     {"sync_bn", cfg.sync_bn ? "1" : "0"}};
  st.class_names = d.classes;
  st.epoch = epochs_completed;
  st.step = step;
  st.rng = {default_generator().seed(), default_generator().offset()};
  st.loader = {loader.position().epoch, loader.position().batch, cfg.seed};
  const optim::OptimizerState os = opt.state_dict();
  st.optimizer.name = opt.name();
  st.optimizer.tensors = os.tensors;
  st.optimizer.scalars = io::state_dict_from(os.scalars);
  if (sched != nullptr) {
    st.scheduler.name = "scheduler";
    st.scheduler.values = io::state_dict_from(sched->state_dict());
  }
  st.extra["best_test_acc"] = best_acc;
  // Weights first, then the state that refers to them: a crash between the two leaves a state
  // that is one epoch behind the weights at worst, never a state without weights.
  save_weights(p.weights, model, cfg, d);
  io::save_training_state(p.state, st);
  if (is_best) save_weights(p.best, model, cfg, d);
}

void apply_saved_config(const io::TrainingState& st, TrainConfig& cfg) {
  const auto& m = st.model_config;
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    EMBER_CHECK(it != m.end(), "--resume: the training state has no '", key, "'");
    return it->second;
  };
  const bool keep_epochs = std::find(cfg.explicitly_set.begin(), cfg.explicitly_set.end(), "epochs") != cfg.explicitly_set.end();
  cfg.model = get("model");
  cfg.data = get("data");
  cfg.data_dir = get("data_dir");
  if (!keep_epochs) cfg.epochs = std::stoi(get("epochs"));
  cfg.batch_size = std::stoll(get("batch_size"));
  cfg.lr = std::stod(get("lr"));
  cfg.optimizer = get("optimizer");
  cfg.momentum = std::stod(get("momentum"));
  cfg.weight_decay = std::stod(get("weight_decay"));
  cfg.scheduler = get("scheduler");
  cfg.warmup_epochs = std::stod(get("warmup_epochs"));
  cfg.label_smoothing = std::stod(get("label_smoothing"));
  cfg.augment = get("augment") == "1";
  cfg.shuffle = get("shuffle") == "1";
  cfg.seed = std::stoull(get("seed"));
  // ImageFolder settings (absent from checkpoints written before them: the defaults).
  auto get_or = [&](const char* key, const std::string& fallback) {
    auto it = m.find(key);
    return it != m.end() ? it->second : fallback;
  };
  cfg.val = get_or("val", "");
  cfg.val_split = std::stod(get_or("val_split", "-1"));
  cfg.image_size = std::stoll(get_or("image_size_option", "-1"));
  cfg.cache_dir = get_or("cache_dir", "");
  cfg.skip_bad_images = get_or("skip_bad_images", "0") == "1";
  cfg.sync_bn = get_or("sync_bn", "0") == "1";
  // The loader position is per process: it means the same batches only with the same world size.
  const auto ws = m.find("world_size");
  const int saved_world = ws == m.end() ? 1 : std::stoi(ws->second);
  EMBER_CHECK(saved_world == cfg.world_size, "--resume: the checkpoint was written by a run with ", saved_world,
              " process(es) but this run has ", cfg.world_size, "; resume it with the same number (docs/distributed.md)");
  cfg.init_weights.clear();  // the checkpoint's weights win
}

void restore_training_state(const io::TrainingState& st, optim::Optimizer& opt, optim::LRScheduler* sched,
                            data::DataLoader& loader, int64_t& step, int& start_epoch, double& best_acc) {
  optim::OptimizerState os;
  os.tensors = st.optimizer.tensors;
  os.scalars = io::state_doubles(st.optimizer.scalars);
  opt.load_state_dict(os);
  if (sched != nullptr && !st.scheduler.name.empty()) sched->load_state_dict(io::state_doubles(st.scheduler.values));
  default_generator().set_state(st.rng.seed, st.rng.offset);
  loader.set_position({st.loader.epoch, st.loader.batch_index});
  step = st.step;
  start_epoch = static_cast<int>(st.epoch);
  auto it = st.extra.find("best_test_acc");
  best_acc = it != st.extra.end() ? io::state_get<double>(st.extra, "best_test_acc") : -1;
}

// ---- eval and predict ----------------------------------------------------------------------

EvalResult evaluate(const LoadedModel& m, const std::string& data, const std::string& data_dir, int64_t batch_size) {
  DataInfo d = open_data(data, data_dir, {.image_size = m.image_size, .eval_only = true});
  if (d.kind == DataKind::image_folder) d.resize = m.resize;  // resize as the model was trained
  EMBER_CHECK(d.channels == m.in_channels && d.image_size == m.image_size, "eval: the model expects ", m.in_channels,
              "x", m.image_size, "x", m.image_size, " images, the data has ", d.channels, "x", d.image_size, "x",
              d.image_size);
  EMBER_CHECK(d.classes.size() == m.classes.size(), "eval: the model has ", m.classes.size(), " classes, the data ",
              d.classes.size());
  DataInfo norm = d;
  norm.mean = m.mean;  // normalize as the model was trained
  norm.std = m.std;
  data::DataLoader loader(d.test, {.batch_size = batch_size, .transform = make_eval_transform(norm)});
  return evaluate_loader(*m.model, loader, static_cast<int64_t>(m.classes.size()));
}

std::vector<Prediction> predict(const LoadedModel& m, const std::vector<std::string>& inputs, int k) {
  std::vector<Prediction> out;
  DataInfo norm;
  norm.mean = m.mean;
  norm.std = m.std;
  const data::Compose tf = make_eval_transform(norm);
  for (const std::string& in : inputs) {
    Tensor input;  // (C, H, W) float32, normalized
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      // An image file: decoded as the model's channels, then the checkpoint's eval transform.
      const Tensor img = data::decode_image(in, m.in_channels == 1 ? data::ImageMode::Gray : data::ImageMode::RGB);
      const int64_t resize = m.resize > 0 ? m.resize : m.image_size;
      input = image_eval_transform(resize, m.image_size, false, m.mean, m.std)(img);
    } else {
      const size_t colon = in.rfind(':');
      EMBER_CHECK(colon != std::string::npos && colon + 1 < in.size(), "predict: '", in,
                  "' is neither an image file nor FILE:INDEX (an image inside an IDX images file)");
      const std::string file = in.substr(0, colon);
      int64_t index = -1;
      try {
        index = std::stoll(in.substr(colon + 1));
      } catch (const std::exception&) {
        EMBER_THROW("predict: '", in.substr(colon + 1), "' in '", in, "' is not an image index");
      }
      Tensor images = data::read_idx(file);
      EMBER_CHECK(images.dim() == 3 || images.dim() == 4, "predict: ", file, " holds no images (shape ", images.shape(), ")");
      EMBER_CHECK(index >= 0 && index < images.size(0), "predict: index ", index, " is out of range for ", file, " (",
                  images.size(0), " images)");
      Tensor img = images.select(0, index);
      if (img.dim() == 2) img = img.unsqueeze(0);
      EMBER_CHECK(img.size(0) == m.in_channels && img.size(1) == m.image_size && img.size(2) == m.image_size,
                  "predict: the model expects ", m.in_channels, "x", m.image_size, "x", m.image_size, " images, ", in,
                  " is ", shape_str(img.shape()));
      input = tf(img);
    }
    NoGradGuard g;
    Tensor probs = softmax(m.model->forward(input.unsqueeze(0)), 1).select(0, 0);
    std::vector<float> p = probs.to_vector<float>();
    std::vector<int> order(p.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    Prediction pr;
    for (int i = 0; i < std::min<int>(k, static_cast<int>(order.size())); ++i)
      pr.top.emplace_back(m.classes[order[i]], p[order[i]]);
    out.push_back(pr);
  }
  return out;
}

}  // namespace ember::train
