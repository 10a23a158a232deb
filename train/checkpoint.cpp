// Datasets, transforms and weights files for the trainer; eval and predict. The checkpoint sets
// are in train/checkpoint_set.cpp.

#include "checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../data/auto_augment.h"
#include "../data/cifar.h"
#include "../data/idx.h"
#include "../data/image.h"
#include "../data/image_transforms.h"
#include "../io/safetensors.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../models/zoo.h"
#include "finetune.h"

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

bool is_image_folder_dir(const std::string& dir) {
  return fs::is_directory(dir) && !is_cifar_dir(dir) && !is_idx_dir(dir);
}

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
  EMBER_CHECK(test->channels() == train->channels() && test->height() == train->height() &&
                  test->width() == train->width(),
              "'", d.dir, "': the test images are ", test->channels(), "x", test->height(), "x", test->width(),
              " but the training images are ", train->channels(), "x", train->height(), "x", train->width(),
              "; both splits must have the same image size");
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
  d.samples = train->size();
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

data::Compose make_train_transform(const DataInfo& d, bool flip, const std::string& policy, double random_erasing) {
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
  // torchvision's classification recipe order: crop and flip, the policy on the u8 image,
  // ToTensor, Normalize, RandomErasing on the normalized tensor.
  if (policy == "trivial") t.push_back(data::TrivialAugmentWide());
  else if (policy == "randaug") t.push_back(data::RandAugment(2, 9));
  else EMBER_CHECK(policy == "light", "--augment must be light, trivial or randaug, got '", policy, "'");
  t.push_back(data::ToTensor());
  t.push_back(data::Normalize(d.mean, d.std));
  if (random_erasing > 0) t.push_back(data::RandomErasing(random_erasing));
  return data::Compose(t);
}

data::Compose make_eval_transform(const DataInfo& d) {
  if (d.kind == DataKind::image_folder) return image_eval_transform(d.resize, d.image_size, d.cached, d.mean, d.std);
  return data::Compose{data::ToTensor(), data::Normalize(d.mean, d.std)};
}

// ---- weights files ------------------------------------------------------------------------------

namespace {
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  for (double v : t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// CRC-32 (zlib) of every tensor's name, dtype, shape and bytes, in name order (as the
// training-state checksum, Note [Training-state file]).
std::string tensors_crc32(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::pair<std::string, Tensor>> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace_back(name, t.to(Device::cpu()).contiguous());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const auto& [name, t] : sorted) {
    const std::string desc = name + '\0' + io::safetensors_dtype_name(t.dtype()) + '\0' + shape_str(t.shape()) + '\0';
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(desc.data()), desc.size());
    // Never a null pointer into zlib: crc32_z(crc, NULL, 0) returns the *initial* CRC, which
    // would forget every tensor before a zero-element one.
    if (t.nbytes() > 0) crc = crc32_z(crc, static_cast<const Bytef*>(t.data()), static_cast<size_t>(t.nbytes()));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32:%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return buf;
}
}  // namespace

void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d,
                  const std::string& run, int64_t step) {
  const std::vector<std::pair<std::string, Tensor>> tensors = model.state_dict();
  // Nothing non-finite is ever written (Note [Divergence guard] in train/step_guard.h).
  for (const auto& [name, t] : tensors)
    EMBER_CHECK(all_finite(t), "refusing to write ", path, ": parameter '", name, "' holds a NaN or an infinity",
                step >= 0 ? " at step " + std::to_string(step) : std::string());
  std::map<std::string, std::string> meta{
      {"format", "pt"},  // what safetensors.torch.save_file writes
      {"ember.model", cfg.model},
      {"ember.in_channels", std::to_string(d.channels)},
      {"ember.image_size", std::to_string(d.image_size)},
      {"ember.resize", std::to_string(d.resize)},
      {"ember.classes", json(d.classes).dump()},
      {"ember.mean", json(d.mean).dump()},
      {"ember.std", json(d.std).dump()},
      {"ember.checksum", tensors_crc32(tensors)},
  };
  // Which images of the tree the run held out (Note [Held-out split]); "none" for a run that
  // held none out, so that a file written before the key existed is told apart.
  meta["ember.split"] = d.split ? split_json(*d.split) : "none";
  if (!run.empty()) meta["ember.run"] = run;
  if (step >= 0) meta["ember.step"] = std::to_string(step);
  io::save_safetensors(path, tensors, meta);
}

void verify_weights_checksum(const io::SafetensorsFile& f) {
  auto it = f.metadata.find("ember.checksum");
  if (it == f.metadata.end()) return;  // not written by ember (a PyTorch file): nothing to compare
  const std::string actual = tensors_crc32(f.tensors);
  EMBER_CHECK(actual == it->second, f.path, ": the tensors do not match the file's checksum (", actual,
              ", the file says ", it->second, "): the file was damaged or edited after it was written");
}

void check_finite_weights(const io::SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors) {
    if (!is_floating(t.dtype())) continue;
    const std::vector<double> v = t.to(DType::f64).contiguous().to_vector<double>();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) {
        if (bad++ == 0) first = static_cast<int64_t>(i);
      }
    EMBER_CHECK(bad == 0, f.path, ": tensor '", name, "' holds ", bad, " NaN or infinite value", bad == 1 ? "" : "s",
                " (the first at element ", first, " of ", v.size(), "): a model with these weights gives NaN for "
                "every input; refusing to use it");
  }
}

void check_same_names(const nn::Module& model, const std::string& model_name, const io::SafetensorsFile& f) {
  std::unordered_set<std::string> mine, theirs;
  for (const auto& [name, t] : model.state_dict()) mine.insert(name);
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : f.tensors) {
    theirs.insert(name);
    if (!mine.count(name)) unexpected.push_back(name);
  }
  for (const auto& [name, t] : model.state_dict())
    if (!theirs.count(name)) missing.push_back(name);
  std::sort(missing.begin(), missing.end());  // by name, as load_state_dict lists them
  std::sort(unexpected.begin(), unexpected.end());
  if (missing.empty() && unexpected.empty()) return;
  std::string problems;
  if (!missing.empty()) problems += "missing keys: " + name_list(missing);
  if (!unexpected.empty()) problems += (problems.empty() ? "" : "; ") + std::string("unexpected keys: ") + name_list(unexpected);
  EMBER_THROW(f.path, ": the tensors do not match the model ", model_name, ": ", problems);
}

void load_weights_into(nn::Module& model, const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  verify_weights_checksum(f);
  check_finite_weights(f);
  check_same_names(model, model.type_name(), f);
  try {
    model.load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
}

LoadedModel load_model(const std::string& checkpoint) {
  std::string path = checkpoint;
  std::optional<CheckpointReader> reader;  // the set stays in place while it is read
  if (fs::is_directory(checkpoint)) {
    const fs::path dir(checkpoint);
    if (has_checkpoint(checkpoint)) {
      reader.emplace(checkpoint);  // the whole set verified
      const Manifest& m = reader->manifest();
      path = reader->path(m.has_best ? m.best : m.weights);
    } else if (fs::exists(dir / "best.safetensors") || fs::exists(dir / "last.safetensors")) {
      // A directory written before checkpoint sets: its weights files, checked on their own.
      path = (dir / (fs::exists(dir / "best.safetensors") ? "best.safetensors" : "last.safetensors")).string();
    } else {
      EMBER_THROW("'", checkpoint, "' holds no checkpoint (no ", kManifestName, ")");
    }
  }
  EMBER_CHECK(fs::exists(path), "checkpoint '", path, "' does not exist");
  io::SafetensorsFile f = io::load_safetensors(path);
  verify_weights_checksum(f);
  check_finite_weights(f);
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
    if (auto it = f.metadata.find("ember.split"); it != f.metadata.end() && it->second != "none")
      m.split = split_from_json(it->second, path);
  } catch (const json::exception& e) {
    EMBER_THROW(path, ": invalid ember metadata: ", e.what());
  } catch (const std::invalid_argument&) {
    EMBER_THROW(path, ": invalid ember metadata (a number was expected)");
  }
  m.model = models::create_model({.name = m.model_name, .in_channels = m.in_channels, .image_size = m.image_size,
                                  .num_classes = static_cast<int64_t>(m.classes.size())});
  check_same_names(*m.model, m.model_name, f);
  try {
    m.model->load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
  m.model->eval();
  return m;
}

LoadedModel load_pytorch_model(const std::string& path, const std::string& model_name, int64_t image_size) {
  EMBER_CHECK(fs::is_regular_file(path), "weights file '", path, "' does not exist");
  EMBER_CHECK(image_size >= 8, "--image-size must be at least 8, got ", image_size);
  const std::vector<std::string> names = models::model_names();
  EMBER_CHECK(std::find(names.begin(), names.end(), model_name) != names.end(), "unknown model '", model_name,
              "' (known models: simple_cnn, cnn, resnet18, resnet18_cifar, resnet_small)");
  // The shapes that size the model: the first convolution's input channels, the classifier's rows.
  const io::SafetensorsFile f = io::load_safetensors(path);
  const std::string classifier = models::classifier_name(model_name) + ".weight";
  int64_t channels = -1, classes = -1;
  for (const auto& [name, t] : f.tensors) {
    if (name == "conv1.weight" && t.dim() == 4) channels = t.size(1);
    if (name == classifier && t.dim() == 2) classes = t.size(0);
  }
  EMBER_CHECK(channels > 0 && classes > 0, path, " is not a ", model_name, " state_dict: it has no ",
              channels > 0 ? classifier : std::string("conv1.weight"), " of the right rank (",
              f.tensors.size(), " tensors)");
  LoadedModel m;
  m.model_name = model_name;
  m.in_channels = channels;
  m.image_size = image_size;
  m.resize = std::llround(static_cast<double>(image_size) * 256.0 / 224.0);  // torchvision's 256 for 224
  for (int64_t c = 0; c < classes; ++c) m.classes.push_back(std::to_string(c));
  m.mean = {0.485, 0.456, 0.406};  // ImageNet's, as torchvision's weights expect
  m.std = {0.229, 0.224, 0.225};
  if (channels != 3) {  // the mean of ImageNet's statistics for other channel counts
    m.mean.assign(channels, (0.485 + 0.456 + 0.406) / 3);
    m.std.assign(channels, (0.229 + 0.224 + 0.225) / 3);
  }
  m.model = models::create_model({.name = model_name, .in_channels = channels, .image_size = image_size,
                                  .num_classes = classes});
  load_pytorch_weights(*m.model, model_name, path, false);
  m.model->eval();
  return m;
}

// ---- eval and predict ----------------------------------------------------------------------

namespace {
// The held-out images of `d` (the whole tree, opened for evaluation) when it is the tree the
// model's run split, or an error when it is at that path but has changed (Note [Held-out split]).
// Returns 0 when `d` is another tree, else the tree's size.
int64_t restrict_to_held_out(const LoadedModel& m, DataInfo& d) {
  if (d.kind != DataKind::image_folder || !m.split) return 0;
  const HeldOutSplit& s = *m.split;
  if (d.samples_hash != s.samples_hash) {
    std::error_code ec;
    const bool same_path = fs::equivalent(d.dir, s.data, ec);
    EMBER_CHECK(!same_path, "eval: '", d.dir, "' is the tree the model's run split with --val-split ", s.fraction,
                " --seed ", s.seed, ", but it has changed since (", d.samples, " images now, ", s.samples,
                " then", d.samples == s.samples ? ", some added, removed or renamed" : "",
                "): its held-out images can no longer be told apart from the training images. Evaluate on a "
                "separate tree with --data, or train again");
    return 0;
  }
  std::vector<int64_t> labels(static_cast<size_t>(d.image_test->size()));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = d.image_test->label(static_cast<int64_t>(i));
  const data::SplitIndices split = data::stratified_split(labels, s.fraction, s.seed);
  EMBER_CHECK(static_cast<int64_t>(split.val.size()) == s.held_out, "eval: '", d.dir, "': the split gives ",
              split.val.size(), " held-out images, the run recorded ", s.held_out);
  d.image_test = std::make_shared<const data::ImageSubset>(d.image_test, split.val);
  d.test = d.image_test;
  return d.samples;
}
}  // namespace

EvalResult evaluate(const LoadedModel& m, const std::string& data, const std::string& data_dir, int64_t batch_size) {
  DataInfo d = open_data(data, data_dir, {.image_size = m.image_size, .eval_only = true});
  const int64_t held_out_of = restrict_to_held_out(m, d);
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
  EvalResult r = evaluate_loader(*m.model, loader, static_cast<int64_t>(m.classes.size()));
  r.held_out_of = held_out_of;
  return r;
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
    // A path that exists is an image file: decode_image refuses a FIFO or a device by name.
    if (fs::exists(in, ec) && !fs::is_directory(in, ec)) {
      // An image file: decoded as the model's channels, then the checkpoint's eval transform.
      const Tensor img = data::decode_image(in, m.in_channels == 1 ? data::ImageMode::Gray : data::ImageMode::RGB);
      const int64_t resize = m.resize > 0 ? m.resize : m.image_size;
      input = image_eval_transform(resize, m.image_size, false, m.mean, m.std)(img);
    } else {
      const size_t colon = in.rfind(':');
      EMBER_CHECK(colon != std::string::npos && colon + 1 < in.size(), "predict: '", in,
                  "' is neither an image file nor FILE:INDEX (an image inside an IDX images file)");
      const std::string file = in.substr(0, colon);
      // Decimal digits only: "1.5", "1e3", " 7", "0x10" and an index past int64 are not indices.
      const std::string text = in.substr(colon + 1);
      int64_t index = -1;
      const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), index);
      EMBER_CHECK(err == std::errc() && end == text.data() + text.size() && text[0] != '-' && text[0] != '+',
                  "predict: '", text, "' in '", in, "' is not an image index (a non-negative decimal integer)");
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
    const Tensor logits = m.model->forward(input.unsqueeze(0)).select(0, 0);
    std::vector<float> p = softmax(logits, 0).to_vector<float>();
    std::vector<int> order(p.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    Prediction pr;
    pr.logits = logits.to_vector<float>();
    for (int i = 0; i < std::min<int>(k, static_cast<int>(order.size())); ++i)
      pr.top.emplace_back(m.classes[order[i]], p[order[i]]);
    out.push_back(pr);
  }
  return out;
}

}  // namespace ember::train
