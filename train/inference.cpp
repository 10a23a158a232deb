// load_model (ember checkpoints and weights, PyTorch state_dicts), evaluate and predict.

#include "inference.h"

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
#include "checkpoint.h"
#include "data_setup.h"
#include "finetune.h"
#include "weights.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

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
  models::check_model_name(model_name);
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
