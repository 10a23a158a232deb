// Checkpoint sets (Note [Checkpoint sets] in train/checkpoint.h): the manifest, its writer and
// reader, and the training state a checkpoint holds.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "../core/generator.h"
#include "../io/atomic_file.h"
#include "../io/fault.h"
#include "../io/safetensors.h"
#include "config.h"
#include "data_setup.h"
#include "weights.h"
#include "checkpoint.h"
#include "run_dir.h"
#include "run_report.h"

namespace ember::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- training checkpoints ---------------------------------------------------------------------

namespace {
// The GradScaler's state_dict keys ("scale", "_growth_tracker", ...) in TrainingState::extra.
constexpr const char* kScalerPrefix = "grad_scaler.";

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

std::string split_json(const HeldOutSplit& s) {
  return json{{"data", s.data},
              {"fraction", s.fraction},
              {"seed", s.seed},
              {"samples", s.samples},
              {"held_out", s.held_out},
              {"samples_hash", s.samples_hash}}
      .dump();
}

namespace {
HeldOutSplit split_from(const json& j) {
  return {.data = j.at("data").get<std::string>(),
          .fraction = j.at("fraction").get<double>(),
          .seed = j.at("seed").get<uint64_t>(),
          .samples = j.at("samples").get<int64_t>(),
          .held_out = j.at("held_out").get<int64_t>(),
          .samples_hash = j.at("samples_hash").get<std::string>()};
}
}  // namespace

HeldOutSplit split_from_json(const std::string& text, const std::string& where) {
  try {
    return split_from(json::parse(text));
  } catch (const json::exception& e) {
    EMBER_THROW(where, ": the held-out split is not valid: ", e.what());
  }
}

Manifest parse_manifest(std::span<const uint8_t> bytes, const std::string& path) {
  Manifest m;
  try {
    const json j = json::parse(bytes.begin(), bytes.end());
    EMBER_CHECK(j.is_object() && j.value("format", "") == "ember.checkpoint.v1", path,
                ": not an ember checkpoint manifest");
    m.run = j.at("run").get<std::string>();
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<int64_t>();
    m.weights = file_from_json(j.at("weights"));
    m.state = file_from_json(j.at("state"));
    m.model = j.value("model", "");
    m.data = j.value("data", "");
    m.data_dir = j.value("data_dir", "");
    m.val = j.value("val", "");
    m.amp = j.value("amp", "off");
    if (j.contains("best") && !j.at("best").is_null()) {
      m.has_best = true;
      m.best = file_from_json(j.at("best").at("weights"));
      m.best_step = j.at("best").at("step").get<int64_t>();
      m.best_acc = j.at("best").at("test_acc").get<double>();
    }
    m.split_recorded = j.contains("split");
    if (m.split_recorded && !j.at("split").is_null()) m.split = split_from(j.at("split"));
  } catch (const json::exception& e) {
    EMBER_THROW(path, ": not a valid checkpoint manifest: ", e.what());
  }
  EMBER_CHECK(m.step >= 0 && m.epoch >= 0, path, ": step ", m.step, " and epoch ", m.epoch, " must be >= 0");
  // Its files are those of step directories (Note [Run directory ownership] in train/run_dir.h):
  // a manifest that names anything else (a name that leaves the directory among them) is not one
  // ember wrote, and nothing it names is ember's.
  auto step_file = [&](const FileRef& f, const char* file, const char* what) {
    const fs::path rel(f.path);
    if (rel.filename() == file && is_step_dir_name(rel.parent_path().string())) return;
    std::string shown = f.path;  // a NUL would end the message (a C string) there
    for (size_t at = shown.find('\0'); at != std::string::npos; at = shown.find('\0', at)) shown.replace(at, 1, "\\0");
    EMBER_THROW(path, ": names the ", what, " file '", shown, "', which is not step-<N>/", file,
                " inside the checkpoint directory");
  };
  step_file(m.weights, "model.safetensors", "weights");
  step_file(m.state, "state.safetensors", "state");
  if (m.has_best) step_file(m.best, "model.safetensors", "best weights");
  return m;
}

namespace {

// Every file the manifest names is checked: size, CRC-32, and the run and step inside it.
void check_files(const std::string& dir, const Manifest& m) {
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
    int64_t step = -1;
    if (!s.empty() && std::from_chars(s.data(), s.data() + s.size(), step).ptr != s.data() + s.size()) step = -2;
    check_belongs(full, get("ember.run"), step, m, want_step);
  };
  weights_owner(m.weights, m.step);
  if (m.has_best) weights_owner(m.best, m.best_step);
  const std::string state_path = (fs::path(dir) / m.state.path).string();
  const io::TrainingState st = io::load_training_state(state_path);
  auto it = st.extra.find("run");
  check_belongs(state_path, it == st.extra.end() ? "" : io::state_get<std::string>(st.extra, "run"), st.step, m,
                m.step);
}

// All of the open file `fd` (a manifest: at most kMaxManifestBytes).
std::vector<uint8_t> read_manifest_fd(int fd, const std::string& path) {
  struct stat st {};
  EMBER_CHECK(::fstat(fd, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  io::check_size_limit(path, static_cast<uint64_t>(st.st_size), kMaxManifestBytes, "a checkpoint manifest");
  std::vector<uint8_t> bytes;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    EMBER_CHECK(n >= 0, path, ": cannot read: ", std::strerror(errno));
    if (n == 0) return bytes;
    bytes.insert(bytes.end(), buf, buf + n);
    io::check_size_limit(path, bytes.size(), kMaxManifestBytes, "a checkpoint manifest");
  }
}

}  // namespace

Manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  EMBER_CHECK(fs::exists(path), "'", dir, "' holds no checkpoint (no ", kManifestName, ")");
  return parse_manifest(io::read_file(path, kMaxManifestBytes, "a checkpoint manifest"), path);
}

// Note [Reading a checkpoint while it is saved]
// A run replaces checkpoint.json at every save and then removes the step directories the new
// manifest no longer names, so a reader (`ember eval`/`predict`/`export` of a live run, or a
// resume from it) that read the old manifest could find its files gone. Readers therefore take a
// shared flock on the manifest file they read, and the writer removes the directories of a
// replaced manifest only once it gets an exclusive flock on that (replaced) file. A reader that
// locked a manifest which has been replaced meanwhile (its inode is no longer the one at the
// path) lets it go and reads the new one. While a CheckpointReader exists, every file it checked
// stays in place; the writer, when a reader holds the lock, leaves the old directories marked
// (Note [Run directory ownership] in train/run_dir.h) and removes them after a later save or
// when it ends.
CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    EMBER_CHECK(fs::symlink_status(path, ec).type() != fs::file_type::not_found, "'", dir,
                "' holds no checkpoint (no ", kManifestName, ")");
    io::check_regular_file(path);  // a FIFO or a device: refused by its kind, unopened
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // one planted since: no wait
    if (fd_ < 0) {
      EMBER_CHECK(errno != ENOENT, "'", dir, "' holds no checkpoint (no ", kManifestName, ")");
      EMBER_THROW(path, ": cannot open for reading: ", std::strerror(errno));
    }
    int rc;
    while ((rc = ::flock(fd_, LOCK_SH)) != 0 && errno == EINTR) {
    }
    struct stat held {}, now {};
    if (rc == 0 && ::fstat(fd_, &held) == 0 && !S_ISREG(held.st_mode)) {
      ::close(fd_);
      EMBER_THROW(path, ": is ", io::file_kind(held.st_mode), ", not a regular file; ember reads regular files only");
    }
    if (rc == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      break;  // locked, and still the manifest
    ::close(fd_);
    fd_ = -1;
    EMBER_CHECK(rc == 0 || errno == ENOLCK, path, ": cannot lock for reading: ", std::strerror(errno));
    EMBER_CHECK(attempt < 100, path, ": was replaced 100 times while ember tried to read it");
  }
  try {
    m_ = parse_manifest(read_manifest_fd(fd_, path), path);
    check_files(dir, m_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

CheckpointReader::~CheckpointReader() {
  if (fd_ >= 0) ::close(fd_);  // releases the shared lock
}

std::string CheckpointReader::path(const FileRef& f) const { return (fs::path(dir_) / f.path).string(); }

Manifest open_checkpoint(const std::string& dir) { return CheckpointReader(dir).manifest(); }

CheckpointWriter::CheckpointWriter(const std::string& dir, std::string run, bool overwrite, bool continuing)
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
    EMBER_CHECK(continuing || overwrite || !has_checkpoint(dir), "--save: '", dir,
                "' already holds a checkpoint; continue it with --resume ", dir,
                ", or pass --overwrite to replace it with this run");
    // Under the lock, what is ember's here (Note [Run directory ownership] in train/run_dir.h).
    const RunDirSurvey survey = survey_run_dir(
        dir, continuing ? RunDirUse::continuing : overwrite ? RunDirUse::overwrite : RunDirUse::new_run);
    if (continuing) {
      m_ = open_checkpoint(dir);
      saved_ = true;
      named_ = survey.named;
    }
    remove_leftovers(survey);
    if (!continuing) plan_replacement(survey, overwrite);
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
  m_.run = std::move(run);
}

CheckpointWriter::~CheckpointWriter() {
  remove_retired(5.0);  // a reader still holding an old manifest gets a moment to finish
  for (const Retired& r : retired_)
    if (r.manifest_fd >= 0) ::close(r.manifest_fd);  // still marked: the next run removes them
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void CheckpointWriter::remove_leftovers(const RunDirSurvey& survey) {
  std::vector<std::string> removed = io::remove_stale_temp_files(dir_);
  for (const std::string& step : survey.unlisted)
    for (std::string& f : remove_step_dir(dir_, step)) removed.push_back(std::move(f));
  for (const std::string& marker : survey.stray_markers)
    if (::unlink((fs::path(dir_) / marker).c_str()) == 0) removed.push_back(marker);
  for (const std::string& step : survey.named)
    for (const std::string& t : io::remove_stale_temp_files((fs::path(dir_) / step).string()))
      removed.push_back(step + "/" + t);
  if (removed.empty()) return;
  // Said even with --quiet: a removal the user did not ask for is never silent.
  std::fprintf(stderr, "ember train: removed %zu file(s) left in %s by an interrupted save: %s\n", removed.size(),
               dir_.c_str(), join_names(removed).c_str());
}

void CheckpointWriter::plan_replacement(const RunDirSurvey& survey, bool overwrite) {
  std::vector<std::string> listed;
  if (overwrite) {
    replace_steps_ = survey.manifest ? survey.named : survey.orphans;
    if (has_checkpoint(dir_))
      listed.push_back(std::string(kManifestName) + (survey.manifest ? " (run " + survey.manifest_run + ")" : ""));
    for (const std::string& step : replace_steps_) listed.push_back(step + "/");
  }
  for (const std::string& f : survey.run_files) {
    listed.push_back(f);
    if (f != kMetricsFileName) replace_files_.push_back(f);  // the metrics stream is replaced by its writer
  }
  if (listed.empty()) return;
  const std::string names = join_names(listed, listed.size());
  // Said even with --quiet, before anything is replaced.
  if (overwrite)
    std::fprintf(stderr, "ember train: --overwrite: this run's first save replaces %zu earlier file(s) and "
                 "director(ies) in %s: %s\n", listed.size(), dir_.c_str(), names.c_str());
  else
    std::fprintf(stderr, "ember train: %s holds the %s of an earlier run that saved no checkpoint; this run's first "
                 "save replaces it\n", dir_.c_str(), names.c_str());
}

void CheckpointWriter::write_manifest() {
  json j{{"format", "ember.checkpoint.v1"}, {"run", m_.run},          {"step", m_.step},
         {"epoch", m_.epoch},               {"model", m_.model},      {"data", m_.data},
         {"data_dir", m_.data_dir},         {"val", m_.val},          {"amp", m_.amp},
         {"weights", file_json(m_.weights)},
         {"state", file_json(m_.state)},    {"best", nullptr},
         {"split", m_.split ? json::parse(split_json(*m_.split)) : json()}};
  if (m_.has_best)
    j["best"] = json{{"step", m_.best_step}, {"test_acc", m_.best_acc}, {"weights", file_json(m_.best)}};
  // The step directories the new manifest names, and those it stops naming: marked before it is
  // written (Note [Run directory ownership] in train/run_dir.h), removed after.
  std::vector<std::string> next{fs::path(m_.weights.path).parent_path().string()};
  if (m_.has_best && fs::path(m_.best.path).parent_path().string() != next[0])
    next.push_back(fs::path(m_.best.path).parent_path().string());
  std::vector<std::string> retire;
  for (const std::vector<std::string>* from : {&named_, &replace_steps_})
    for (const std::string& step : *from)
      if (std::find(next.begin(), next.end(), step) == next.end() &&
          std::find(retire.begin(), retire.end(), step) == retire.end())
        retire.push_back(step);
  for (const std::string& step : retire) write_step_marker(dir_, step);
  const std::string manifest = (fs::path(dir_) / kManifestName).string();
  // The manifest being replaced: its readers hold a shared lock on it (Note [Reading a checkpoint
  // while it is saved]).
  Retired retired{::open(manifest.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), retire};
  try {
    io::fault_point("save:before-manifest");
    io::write_file_atomic(manifest, j.dump(1) + "\n");
  } catch (...) {
    if (retired.manifest_fd >= 0) ::close(retired.manifest_fd);
    throw;
  }
  io::fault_point("save:after-manifest");
  if (!new_step_.empty()) ::unlink((fs::path(dir_) / step_marker_name(new_step_)).c_str());
  new_step_.clear();
  named_ = next;
  replace_steps_.clear();
  // An earlier run's files (--overwrite) go with its checkpoint, at this run's first save.
  for (const std::string& f : replace_files_) {
    struct stat st {};
    const fs::path p = fs::path(dir_) / f;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(p.c_str());
  }
  replace_files_.clear();
  retired_.push_back(retired);
  remove_retired(0);
}

void CheckpointWriter::remove_retired(double wait_seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  for (auto it = retired_.begin(); it != retired_.end();) {
    bool free = it->manifest_fd < 0;
    while (!free) {
      // Free once no reader holds the replaced manifest (flock unsupported: nothing to wait for).
      free = ::flock(it->manifest_fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK;
      if (free || std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!free) {
      ++it;
      continue;
    }
    for (const std::string& step : it->steps) {
      if (std::find(named_.begin(), named_.end(), step) != named_.end()) continue;
      try {
        remove_step_dir(dir_, step);
      } catch (const Error& e) {
        // The new checkpoint is saved; an old one that cannot be removed stays marked, and the
        // next run that opens the directory tries again.
        std::fprintf(stderr, "ember train: warning: %s\n", e.what());
      }
    }
    if (it->manifest_fd >= 0) ::close(it->manifest_fd);
    it = retired_.erase(it);
  }
}

void CheckpointWriter::save(const TrainConfig& cfg, const DataInfo& d, const nn::Module& model,
                            const io::TrainingState& state) {
  io::fault_point("save:begin");
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(state.step));
  std::string step_dir = name;
  auto taken = [&](const std::string& step) {
    std::error_code ec;
    return fs::symlink_status(fs::path(dir_) / step, ec).type() != fs::file_type::not_found ||
           fs::symlink_status(fs::path(dir_) / step_marker_name(step), ec).type() != fs::file_type::not_found;
  };
  for (int k = 2; taken(step_dir); ++k) step_dir = std::string(name) + "-" + std::to_string(k);
  // The marker first: whatever a crash leaves of this directory is known as ember's.
  write_step_marker(dir_, step_dir);
  new_step_ = step_dir;
  const fs::path full = fs::path(dir_) / step_dir;
  std::error_code ec;
  EMBER_CHECK(fs::create_directory(full, ec) && !ec, "--save: cannot create '", full.string(), "': ",
              ec ? ec.message() : std::string("it exists"));
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
  m_.amp = cfg.amp;
  m_.split = d.split;
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
                                      const optim::LRScheduler* sched, const optim::GradScaler& scaler,
                                      const data::DataLoader& loader, int64_t step, int64_t epochs_completed,
                                      const std::string& run) {
  io::TrainingState st;
  st.model_name = cfg.model;
  st.model_config = {{"model", cfg.model},
                     {"data", cfg.data},
                     {"data_dir", cfg.data_dir},
                     {"epochs", std::to_string(cfg.epochs)},
                     {"batch_size", std::to_string(cfg.batch_size)},
                     {"accum_steps", std::to_string(cfg.accum_steps)},
                     {"lr", fmt(cfg.lr)},
                     {"optimizer", cfg.optimizer},
                     {"momentum", fmt(cfg.momentum)},
                     {"weight_decay", fmt(cfg.weight_decay)},
                     {"scheduler", cfg.scheduler},
                     {"warmup_epochs", fmt(cfg.warmup_epochs)},
                     {"plateau_patience", std::to_string(cfg.plateau_patience)},
                     {"plateau_factor", fmt(cfg.plateau_factor)},
                     {"plateau_metric", cfg.plateau_metric},
                     {"early_stop_patience", std::to_string(cfg.early_stop_patience)},
                     {"early_stop_metric", cfg.early_stop_metric},
                     {"label_smoothing", fmt(cfg.label_smoothing)},
                     {"clip_grad_norm", fmt(cfg.clip_grad_norm)},
                     {"amp", cfg.amp},
                     {"channels_last", cfg.channels_last ? "1" : "0"},
                     {"augment", cfg.augment ? "1" : "0"},
                     {"augment_policy", cfg.augment_policy},
                     {"random_erasing", fmt(cfg.random_erasing)},
                     {"mixup", fmt(cfg.mixup)},
                     {"cutmix", fmt(cfg.cutmix)},
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
                     {"sync_bn", cfg.sync_bn ? "1" : "0"},
                     {"finetune", cfg.finetune ? "1" : "0"},
                     {"freeze_backbone", cfg.freeze_backbone ? "1" : "0"},
                     {"backbone_lr_scale", fmt(cfg.backbone_lr_scale)},
                     {"data_samples", std::to_string(d.samples)},
                     {"samples_hash", d.samples_hash}};
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
  if (scaler.is_enabled())
    for (const auto& [key, value] : scaler.state_dict()) st.extra[std::string(kScalerPrefix) + key] = value;
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
  keep("accum-steps", cfg.accum_steps, static_cast<int64_t>(std::stoll(get_or("accum_steps", "1"))), as_text);
  keep("lr", cfg.lr, std::stod(get("lr")), as_text);
  keep("optimizer", cfg.optimizer, get("optimizer"), as_text);
  keep("momentum", cfg.momentum, std::stod(get("momentum")), as_text);
  keep("weight-decay", cfg.weight_decay, std::stod(get("weight_decay")), as_text);
  keep("scheduler", cfg.scheduler, get("scheduler"), as_text);
  keep("warmup-epochs", cfg.warmup_epochs, std::stod(get("warmup_epochs")), as_text);
  keep("plateau-patience", cfg.plateau_patience, static_cast<int64_t>(std::stoll(get_or("plateau_patience", "10"))),
       as_text);
  keep("plateau-factor", cfg.plateau_factor, std::stod(get_or("plateau_factor", "0.1")), as_text);
  keep("plateau-metric", cfg.plateau_metric, get_or("plateau_metric", ""), as_text);
  keep("early-stop-patience", cfg.early_stop_patience,
       static_cast<int64_t>(std::stoll(get_or("early_stop_patience", "0"))), as_text);
  keep("early-stop-metric", cfg.early_stop_metric, get_or("early_stop_metric", ""), as_text);
  keep("label-smoothing", cfg.label_smoothing, std::stod(get("label_smoothing")), as_text);
  keep("clip-grad-norm", cfg.clip_grad_norm, std::stod(get_or("clip_grad_norm", "0")), as_text);
  keep("amp", cfg.amp, get_or("amp", "off"), as_text);
  keep_flag("channels-last", cfg.channels_last, get_or("channels_last", "0") == "1", "--channels-last");
  keep_flag("no-augment", cfg.augment, get("augment") == "1", "augmentation");
  keep("augment", cfg.augment_policy, get_or("augment_policy", "light"), as_text);
  keep("random-erasing", cfg.random_erasing, std::stod(get_or("random_erasing", "0")), as_text);
  keep("mixup", cfg.mixup, std::stod(get_or("mixup", "0")), as_text);
  keep("cutmix", cfg.cutmix, std::stod(get_or("cutmix", "0")), as_text);
  keep_flag("no-shuffle", cfg.shuffle, get("shuffle") == "1", "shuffling");
  keep("seed", cfg.seed, static_cast<uint64_t>(std::stoull(get("seed"))), as_text);
  keep("val", cfg.val, get_or("val", ""), as_text);
  keep("val-split", cfg.val_split, std::stod(get_or("val_split", "-1")), as_text);
  keep("image-size", cfg.image_size, static_cast<int64_t>(std::stoll(get_or("image_size_option", "-1"))), as_text);
  keep("cache", cfg.cache_dir, get_or("cache_dir", ""), as_text);
  keep_flag("skip-bad-images", cfg.skip_bad_images, get_or("skip_bad_images", "0") == "1", "--skip-bad-images");
  keep_flag("sync-bn", cfg.sync_bn, get_or("sync_bn", "0") == "1", "--sync-bn");
  keep_flag("finetune", cfg.finetune, get_or("finetune", "0") == "1", "--finetune");
  keep_flag("freeze-backbone", cfg.freeze_backbone, get_or("freeze_backbone", "0") == "1", "--freeze-backbone");
  keep("backbone-lr-scale", cfg.backbone_lr_scale, std::stod(get_or("backbone_lr_scale", "1")), as_text);
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
                             "workers", "log-every", "device", "data-on-device"})
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

void check_resumed_data(const io::TrainingState& st, const DataInfo& d) {
  const std::string what = "--resume: the data in '" + d.dir + "' changed since the run was saved: ";
  const std::string then = "; a resumed run needs the data it started with (start a new run, e.g. with "
                           "--init-weights from the checkpoint's weights)";
  if (st.class_names != d.classes) {
    std::vector<std::string> added, removed;
    for (const std::string& c : d.classes)
      if (std::find(st.class_names.begin(), st.class_names.end(), c) == st.class_names.end()) added.push_back(c);
    for (const std::string& c : st.class_names)
      if (std::find(d.classes.begin(), d.classes.end(), c) == d.classes.end()) removed.push_back(c);
    auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (size_t i = 0; i < v.size() && i < 10; ++i) out += (i ? ", '" : "'") + v[i] + "'";
      if (v.size() > 10) out += ", ... (" + std::to_string(v.size()) + " in all)";
      return out;
    };
    std::string change = std::to_string(d.classes.size()) + " classes now, " + std::to_string(st.class_names.size()) +
                         " then";
    if (!added.empty()) change += "; new: " + list(added);
    if (!removed.empty()) change += "; gone: " + list(removed);
    if (added.empty() && removed.empty()) change += " (the same names in another order)";
    EMBER_THROW(what, change, then);
  }
  const auto& m = st.model_config;
  if (auto it = m.find("data_samples"); it != m.end() && it->second != std::to_string(d.samples))
    EMBER_THROW(what, d.samples, " images now, ", it->second, " then", then);
  if (auto it = m.find("samples_hash"); it != m.end() && !it->second.empty() && it->second != d.samples_hash)
    EMBER_THROW(what, "the same ", d.samples, " images in number, but files were added, removed or renamed (sample "
                "list ", d.samples_hash, ", ", it->second, " then)", then);
}

void restore_training_state(const io::TrainingState& st, optim::Optimizer& opt, optim::LRScheduler* sched,
                            optim::GradScaler& scaler, data::DataLoader& loader, int64_t& step, int& start_epoch) {
  optim::OptimizerState os;
  os.tensors = st.optimizer.tensors;
  os.scalars = io::state_doubles(st.optimizer.scalars);
  opt.load_state_dict(os);
  if (sched != nullptr && !st.scheduler.name.empty()) sched->load_state_dict(io::state_doubles(st.scheduler.values));
  if (scaler.is_enabled()) {
    std::map<std::string, double> saved;
    for (const auto& [key, value] : st.extra)
      if (key.rfind(kScalerPrefix, 0) == 0)
        saved[key.substr(std::strlen(kScalerPrefix))] = io::state_get<double>(st.extra, key);
    EMBER_CHECK(!saved.empty(), "--resume: the training state has no loss scaler (", kScalerPrefix,
                "* extras), which an --amp fp16 run saves");
    scaler.load_state_dict(saved);
  }
  default_generator().set_state(st.rng.seed, st.rng.offset);
  loader.set_position({st.loader.epoch, st.loader.batch_index});
  step = st.step;
  start_epoch = static_cast<int>(st.epoch);
}

}  // namespace ember::train
