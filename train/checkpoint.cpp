// Datasets, transforms and checkpoint files for the trainer.

#include "checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "../core/autograd.h"
#include "../core/generator.h"
#include "../data/cifar.h"
#include "../data/idx.h"
#include "../data/image.h"
#include "../data/image_transforms.h"
#include "../io/atomic_file.h"
#include "../io/fault.h"
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
    crc = crc32_z(crc, static_cast<const Bytef*>(t.data()), static_cast<size_t>(t.nbytes()));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32:%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return buf;
}
}  // namespace

void save_weights(const std::string& path, const nn::Module& model, const TrainConfig& cfg, const DataInfo& d,
                  const std::string& run, int64_t step) {
  const std::vector<std::pair<std::string, Tensor>> tensors = model.state_dict();
  // Nothing non-finite is ever written (Note [Divergence guard] in train/trainer.cpp).
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

void load_weights_into(nn::Module& model, const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  verify_weights_checksum(f);
  try {
    model.load_state_dict(f.tensors);
  } catch (const Error& e) {
    EMBER_THROW(path, ": ", e.what());
  }
}

LoadedModel load_model(const std::string& checkpoint) {
  std::string path = checkpoint;
  if (fs::is_directory(checkpoint)) {
    const fs::path dir(checkpoint);
    if (has_checkpoint(checkpoint)) {
      const Manifest m = open_checkpoint(checkpoint);  // the whole set verified
      path = (dir / (m.has_best ? m.best.path : m.weights.path)).string();
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

json file_json(const FileRef& f) { return json{{"path", f.path}, {"bytes", f.bytes}, {"crc32", f.crc32}}; }

FileRef file_from_json(const json& j) { return {j.at("path").get<std::string>(), j.at("bytes").get<uint64_t>(), j.at("crc32").get<std::string>()}; }

FileRef file_ref(const std::string& dir, const std::string& rel) {
  const std::string full = (fs::path(dir) / rel).string();
  return {rel, static_cast<uint64_t>(fs::file_size(full)), file_crc32(full)};
}

// Every file a manifest names exists and has the size and CRC-32 it says.
void check_file(const std::string& dir, const FileRef& f) {
  const std::string full = (fs::path(dir) / f.path).string();
  const std::string manifest = (fs::path(dir) / kManifestName).string();
  EMBER_CHECK(fs::is_regular_file(full), full, ": missing, but ", manifest, " names it: the checkpoint is incomplete");
  const std::string crc = file_crc32(full);
  const uint64_t bytes = fs::file_size(full);
  EMBER_CHECK(bytes == f.bytes && crc == f.crc32, full, ": does not match ", manifest, " (", bytes, " bytes, ", crc,
              "; the manifest says ", f.bytes, " bytes, ", f.crc32, "): the file was changed or damaged after it was "
              "saved, or comes from another checkpoint; this checkpoint cannot be used");
}

void check_belongs(const std::string& file, const std::string& run, int64_t step, const Manifest& m,
                   int64_t want_step) {
  EMBER_CHECK(run == m.run && step == want_step, file, ": belongs to run ", run.empty() ? "?" : run, " step ", step,
              ", but the manifest names run ", m.run, " step ", want_step,
              ": the files of this checkpoint do not belong together");
}
}  // namespace

std::string file_crc32(const std::string& path) {
  io::FileReader f(path);
  std::vector<uint8_t> buf(1 << 20);
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (uint64_t off = 0; off < f.size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f.size() - off));
    f.read_at(off, buf.data(), n, "the file");
    crc = crc32_z(crc, buf.data(), n);
    off += n;
  }
  char out[32];
  std::snprintf(out, sizeof out, "crc32:%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return out;
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t v = ((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (t * 0x9E3779B97F4A7C15ull));
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool has_checkpoint(const std::string& dir) { return fs::exists(fs::path(dir) / kManifestName); }

Manifest open_checkpoint(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  EMBER_CHECK(fs::exists(path), "'", dir, "' holds no checkpoint (no ", kManifestName, ")");
  Manifest m;
  try {
    const std::vector<uint8_t> bytes = io::read_file(path);
    const json j = json::parse(bytes.begin(), bytes.end());
    EMBER_CHECK(j.value("format", "") == "ember.checkpoint.v1", path, ": not an ember checkpoint manifest");
    m.run = j.at("run").get<std::string>();
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<int64_t>();
    m.weights = file_from_json(j.at("weights"));
    m.state = file_from_json(j.at("state"));
    m.model = j.value("model", "");
    m.data = j.value("data", "");
    m.data_dir = j.value("data_dir", "");
    m.val = j.value("val", "");
    if (j.contains("best") && !j.at("best").is_null()) {
      m.has_best = true;
      m.best = file_from_json(j.at("best").at("weights"));
      m.best_step = j.at("best").at("step").get<int64_t>();
      m.best_acc = j.at("best").at("test_acc").get<double>();
    }
  } catch (const json::exception& e) {
    EMBER_THROW(path, ": not a valid checkpoint manifest: ", e.what());
  }
  check_file(dir, m.weights);
  check_file(dir, m.state);
  if (m.has_best) check_file(dir, m.best);
  // The files name the run and the step too: a set assembled from two runs is refused even when
  // its manifest was rewritten to match them.
  auto weights_owner = [&](const FileRef& f, int64_t want_step) {
    const std::string full = (fs::path(dir) / f.path).string();
    const io::SafetensorsFile w = io::load_safetensors(full);
    verify_weights_checksum(w);
    auto get = [&](const char* key) {
      auto it = w.metadata.find(key);
      return it == w.metadata.end() ? std::string() : it->second;
    };
    const std::string s = get("ember.step");
    check_belongs(full, get("ember.run"), s.empty() ? -1 : std::stoll(s), m, want_step);
  };
  weights_owner(m.weights, m.step);
  if (m.has_best) weights_owner(m.best, m.best_step);
  const std::string state_path = (fs::path(dir) / m.state.path).string();
  const io::TrainingState st = io::load_training_state(state_path);
  auto it = st.extra.find("run");
  check_belongs(state_path, it == st.extra.end() ? "" : io::state_get<std::string>(st.extra, "run"), st.step, m,
                m.step);
  return m;
}

CheckpointWriter::CheckpointWriter(const std::string& dir, std::string run, bool overwrite, bool continuing,
                                   bool quiet)
    : dir_(dir) {
  std::error_code ec;
  EMBER_CHECK(!fs::exists(dir) || fs::is_directory(dir), "--save: '", dir, "' is a file, not a directory");
  fs::create_directories(dir, ec);
  EMBER_CHECK(!ec && fs::is_directory(dir), "--save: cannot create directory '", dir, "': ", ec.message());
  lock_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EMBER_CHECK(lock_fd_ >= 0, "--save: cannot open directory '", dir, "': ", std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    EMBER_THROW("--save: another ember run is writing into '", dir, "' (it holds the directory's lock); wait for it "
                "to end or save into another directory");
  }
  try {
    EMBER_CHECK(::access(dir.c_str(), W_OK) == 0, "--save: cannot write into '", dir, "': ", std::strerror(errno));
    if (has_checkpoint(dir)) {
      if (continuing) {
        m_ = open_checkpoint(dir);
        saved_ = true;
      } else {
        EMBER_CHECK(overwrite, "--save: '", dir, "' already holds a checkpoint; continue it with --resume ", dir,
                    ", or pass --overwrite to replace it with this run");
        // The old checkpoint stays valid until this run's first save replaces its manifest.
        try {
          m_ = open_checkpoint(dir);
        } catch (const Error&) {
          m_ = Manifest{};
        }
      }
    }
    // What an interrupted save left: temporary files and step directories no manifest names.
    int removed = io::remove_stale_temp_files(dir);
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      const bool named = name == fs::path(m_.weights.path).parent_path().string() ||
                         (m_.has_best && name == fs::path(m_.best.path).parent_path().string());
      if (e.is_directory() && name.rfind("step-", 0) == 0 && (!named || !has_checkpoint(dir))) {
        fs::remove_all(e.path());
        ++removed;
      } else if (e.is_directory() && name.rfind("step-", 0) == 0) {
        removed += io::remove_stale_temp_files(e.path().string());
      }
    }
    if (removed > 0 && !quiet)
      std::fprintf(stderr, "ember train: removed %d file(s) left in %s by an interrupted save\n", removed, dir.c_str());
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
  m_.run = std::move(run);
}

CheckpointWriter::~CheckpointWriter() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void CheckpointWriter::write_manifest() {
  json j{{"format", "ember.checkpoint.v1"}, {"run", m_.run},          {"step", m_.step},
         {"epoch", m_.epoch},               {"model", m_.model},      {"data", m_.data},
         {"data_dir", m_.data_dir},         {"val", m_.val},          {"weights", file_json(m_.weights)},
         {"state", file_json(m_.state)},    {"best", nullptr}};
  if (m_.has_best)
    j["best"] = json{{"step", m_.best_step}, {"test_acc", m_.best_acc}, {"weights", file_json(m_.best)}};
  io::fault_point("save:before-manifest");
  io::write_file_atomic((fs::path(dir_) / kManifestName).string(), j.dump(1) + "\n");
  io::fault_point("save:after-manifest");
  remove_unnamed_steps();
}

void CheckpointWriter::remove_unnamed_steps() {
  const std::string last = fs::path(m_.weights.path).parent_path().string();
  const std::string best = m_.has_best ? fs::path(m_.best.path).parent_path().string() : "";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && name != last && name != best) fs::remove_all(e.path(), ec);
  }
}

void CheckpointWriter::save(const TrainConfig& cfg, const DataInfo& d, const nn::Module& model,
                            const io::TrainingState& state) {
  io::fault_point("save:begin");
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(state.step));
  std::string step_dir = name;
  for (int k = 2; fs::exists(fs::path(dir_) / step_dir); ++k) step_dir = std::string(name) + "-" + std::to_string(k);
  const fs::path full = fs::path(dir_) / step_dir;
  std::error_code ec;
  fs::create_directory(full, ec);
  EMBER_CHECK(!ec, "--save: cannot create '", full.string(), "': ", ec.message());
  const std::string weights = step_dir + "/model.safetensors", st = step_dir + "/state.safetensors";
  save_weights((fs::path(dir_) / weights).string(), model, cfg, d, m_.run, state.step);
  io::fault_point("save:after-weights");
  io::save_training_state((fs::path(dir_) / st).string(), state);
  io::fault_point("save:after-state");
  m_.step = state.step;
  m_.epoch = state.epoch;
  m_.weights = file_ref(dir_, weights);
  m_.state = file_ref(dir_, st);
  m_.model = cfg.model;
  m_.data = cfg.data;
  m_.data_dir = cfg.data_dir;
  m_.val = cfg.val;
  if (!saved_) m_.has_best = false;  // a new run (--overwrite): the old best is not this run's
  write_manifest();
  saved_ = true;
}

void CheckpointWriter::mark_best(double acc) {
  EMBER_CHECK(saved_, "mark_best before a checkpoint was saved");
  m_.has_best = true;
  m_.best = m_.weights;
  m_.best_step = m_.step;
  m_.best_acc = acc;
  write_manifest();
}

io::TrainingState make_training_state(const TrainConfig& cfg, const DataInfo& d, const optim::Optimizer& opt,
                                      const optim::LRScheduler* sched, const data::DataLoader& loader, int64_t step,
                                      int64_t epochs_completed, const std::string& run) {
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
                     {"clip_grad_norm", fmt(cfg.clip_grad_norm)},
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
  st.extra["run"] = run;
  return st;
}

void apply_saved_config(const io::TrainingState& st, TrainConfig& cfg, std::vector<std::string>& changed) {
  const auto& m = st.model_config;
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    EMBER_CHECK(it != m.end(), "--resume: the training state has no '", key, "'");
    return it->second;
  };
  auto get_or = [&](const char* key, const std::string& fallback) {
    auto it = m.find(key);
    return it != m.end() ? it->second : fallback;
  };
  auto given = [&](const char* option) {
    return std::find(cfg.explicitly_set.begin(), cfg.explicitly_set.end(), option) != cfg.explicitly_set.end();
  };
  // An option given on resume must agree with the saved run; the saved value wins either way.
  auto keep = [&](const char* option, auto& field, auto saved, auto show) {
    if (given(option) && !(field == saved))
      EMBER_THROW("--resume: --", option, " ", show(field), " conflicts with the saved run's ", show(saved),
                  "; a resumed run keeps its configuration (start a new run with --save to change it)");
    field = saved;
  };
  auto as_text = [](const auto& v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  // A flag given on resume that the saved run did not have (or the reverse, for --no-*).
  auto keep_flag = [&](const char* option, bool& field, bool saved, const char* what) {
    if (given(option) && field != saved)
      EMBER_THROW("--resume: --", option, " conflicts with the saved run, which ran with ", what, " ",
                  saved ? "on" : "off", "; a resumed run keeps its configuration (start a new run with --save to "
                  "change it)");
    field = saved;
  };
  keep("model", cfg.model, get("model"), as_text);
  keep("data", cfg.data, get("data"), as_text);
  keep("data-dir", cfg.data_dir, get("data_dir"), as_text);
  keep("batch-size", cfg.batch_size, static_cast<int64_t>(std::stoll(get("batch_size"))), as_text);
  keep("lr", cfg.lr, std::stod(get("lr")), as_text);
  keep("optimizer", cfg.optimizer, get("optimizer"), as_text);
  keep("momentum", cfg.momentum, std::stod(get("momentum")), as_text);
  keep("weight-decay", cfg.weight_decay, std::stod(get("weight_decay")), as_text);
  keep("scheduler", cfg.scheduler, get("scheduler"), as_text);
  keep("warmup-epochs", cfg.warmup_epochs, std::stod(get("warmup_epochs")), as_text);
  keep("label-smoothing", cfg.label_smoothing, std::stod(get("label_smoothing")), as_text);
  keep("clip-grad-norm", cfg.clip_grad_norm, std::stod(get_or("clip_grad_norm", "0")), as_text);
  keep_flag("no-augment", cfg.augment, get("augment") == "1", "augmentation");
  keep_flag("no-shuffle", cfg.shuffle, get("shuffle") == "1", "shuffling");
  keep("seed", cfg.seed, static_cast<uint64_t>(std::stoull(get("seed"))), as_text);
  keep("val", cfg.val, get_or("val", ""), as_text);
  keep("val-split", cfg.val_split, std::stod(get_or("val_split", "-1")), as_text);
  keep("image-size", cfg.image_size, static_cast<int64_t>(std::stoll(get_or("image_size_option", "-1"))), as_text);
  keep("cache", cfg.cache_dir, get_or("cache_dir", ""), as_text);
  keep_flag("skip-bad-images", cfg.skip_bad_images, get_or("skip_bad_images", "0") == "1", "--skip-bad-images");
  keep_flag("sync-bn", cfg.sync_bn, get_or("sync_bn", "0") == "1", "--sync-bn");
  // --epochs may extend the run, never shorten it below what is done.
  const int saved_epochs = std::stoi(get("epochs"));
  if (given("epochs")) {
    EMBER_CHECK(cfg.epochs >= saved_epochs, "--resume: --epochs ", cfg.epochs, " is less than the saved run's ",
                saved_epochs, "; a resumed run can only be extended");
    if (cfg.epochs != saved_epochs) changed.push_back("epochs " + std::to_string(cfg.epochs));
  } else {
    cfg.epochs = saved_epochs;
  }
  for (const char* option : {"metrics", "save", "save-weights", "max-steps", "eval-every", "eval-limit", "threads",
                             "workers", "log-every", "device"})
    if (given(option)) {
      auto it = cfg.given_text.find(option);
      changed.push_back(std::string(option) + (it != cfg.given_text.end() ? " " + it->second : ""));
    }
  // The loader position is per process: it means the same batches only with the same world size.
  const auto ws = m.find("world_size");
  const int saved_world = ws == m.end() ? 1 : std::stoi(ws->second);
  EMBER_CHECK(saved_world == cfg.world_size, "--resume: the checkpoint was written by a run with ", saved_world,
              " process(es) but this run has ", cfg.world_size, "; resume it with the same number (docs/distributed.md)");
}

void restore_training_state(const io::TrainingState& st, optim::Optimizer& opt, optim::LRScheduler* sched,
                            data::DataLoader& loader, int64_t& step, int& start_epoch) {
  optim::OptimizerState os;
  os.tensors = st.optimizer.tensors;
  os.scalars = io::state_doubles(st.optimizer.scalars);
  opt.load_state_dict(os);
  if (sched != nullptr && !st.scheduler.name.empty()) sched->load_state_dict(io::state_doubles(st.scheduler.values));
  default_generator().set_state(st.rng.seed, st.rng.offset);
  loader.set_position({st.loader.epoch, st.loader.batch_index});
  step = st.step;
  start_epoch = static_cast<int>(st.epoch);
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
