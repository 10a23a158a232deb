// A run directory holds only what ember wrote (Note [Run directory ownership] in train/run_dir.h):
// the checkpoint writer leaves a user's directories alone, refuses to clean without a manifest,
// recognises an interrupted save by its marker, refuses output paths that name a run's own files,
// protects the metrics stream, and readers see a whole checkpoint while a run saves.

#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/io/atomic_file.h>
#include <ember/train/checkpoint.h>
#include <ember/train/config.h>
#include <ember/train/data_setup.h>
#include <ember/train/inference.h>
#include <ember/train/trainer.h>
#include <ember/train/report.h>
#include <ember/train/run_dir.h>
#include <ember/train/run_report.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"

using namespace ember;
using Catch::Contains;
using testing::read_text;
using testing::TempDir;
using testing::write_text;
namespace fs = std::filesystem;

namespace {

// Every entry under `root` with its inode, mode and content: what a test compares before and after.
std::string fingerprint(const fs::path& root) {
  std::vector<std::string> lines;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    std::string line = e.path().string() + " " + std::to_string(st.st_ino) + " " + std::to_string(st.st_mode);
    if (S_ISREG(st.st_mode)) line += " " + read_text(e.path());
    lines.push_back(line);
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// 64 training and 16 test images of 28x28 in 4 classes, as IDX files: two steps an epoch at batch 32.
fs::path make_dataset(const fs::path& dir) {
  fs::create_directories(dir);
  Generator g(5);
  auto make = [&](int64_t n, const std::string& images, const std::string& labels) {
    std::vector<float> noise = rand({n * 28 * 28}, {}, g).to_vector<float>();
    std::vector<uint8_t> img(noise.size()), lab(static_cast<size_t>(n));
    for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(200 * noise[i]);
    for (int64_t i = 0; i < n; ++i) lab[i] = static_cast<uint8_t>(i % 4);
    data::write_idx(dir / images, from_vector<uint8_t>(img, {n, 28, 28}), data::IdxCompression::none);
    data::write_idx(dir / labels, from_vector<uint8_t>(lab, {n}), data::IdxCompression::none);
  };
  make(64, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  make(16, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
  return dir;
}

train::TrainConfig config(const fs::path& data, const fs::path& save) {
  train::TrainConfig c;
  c.data = data.string();
  c.model = "simple_cnn";
  c.optimizer = "adam";
  c.lr = 1e-3;
  c.batch_size = 32;
  c.epochs = 1;
  c.quiet = true;
  c.threads = 1;
  c.save_dir = save.string();
  return c;
}

}  // namespace

TEST_CASE("run directory: a user's directories and copies beside the checkpoints stay", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_user");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  fs::create_directories(run / "step-by-step-notes");
  write_text(run / "step-by-step-notes" / "todo.txt", "mine");
  fs::create_directories(run / "step-00000024-keep");
  write_text(run / "step-00000024-keep" / "model.safetensors", "a backup");
  train::TrainConfig c = config(data, run);
  train::run_training(c);
  // A copy under an exact step name, unlisted and unmarked: not ember's to remove either.
  fs::copy(run / "step-00000002", run / "step-00000001", fs::copy_options::recursive);
  const std::string before = fingerprint(run / "step-by-step-notes") + fingerprint(run / "step-00000024-keep") +
                             fingerprint(run / "step-00000001");
  train::TrainConfig more = c;
  more.resume_dir = run.string();
  more.epochs = 3;
  more.explicitly_set = {"epochs"};
  train::run_training(more);  // two more saves, each removing what the manifest stopped naming
  CHECK(fingerprint(run / "step-by-step-notes") + fingerprint(run / "step-00000024-keep") +
            fingerprint(run / "step-00000001") ==
        before);
  CHECK(train::open_checkpoint(run.string()).step == 6);
}

TEST_CASE("run directory: without checkpoint.json ember refuses to clean its step directories", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_lost");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  train::TrainConfig c = config(data, run);
  train::run_training(c);
  fs::remove(run / train::kManifestName);
  const std::string before = fingerprint(run);
  CHECK_THROWS_WITH(train::run_training(c),
                    "--save: '" + run.string() + "' holds 1 checkpoint directory (step-00000002) but no "
                    "checkpoint.json that names them: they may be complete checkpoints whose manifest was lost, and "
                    "ember does not remove them; move them away, or pass --overwrite to replace them with this run");
  CHECK(fingerprint(run) == before);
  // --overwrite replaces them, at the first save.
  c.overwrite = true;
  train::run_training(c);
  const train::Manifest m = train::open_checkpoint(run.string());
  CHECK(m.weights.path == "step-00000002-2/model.safetensors");
  CHECK(!fs::exists(run / "step-00000002"));
}

TEST_CASE("run directory: an interrupted save is recognised by its marker and removed", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_marker");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  train::TrainConfig c = config(data, run);
  train::run_training(c);
  // What a crash in the middle of the save of step 3 leaves: the marker, then the directory.
  train::write_step_marker(run.string(), "step-00000003");
  fs::create_directories(run / "step-00000003");
  write_text(run / "step-00000003" / "model.safetensors", "half");
  write_text(run / ".step-00000003.ember-unlisted.bak", "not a marker");
  // The manifest's own step directory with a stray marker (a crash just after the manifest).
  train::write_step_marker(run.string(), "step-00000002");
  train::TrainConfig more = c;
  more.resume_dir = run.string();
  more.epochs = 2;
  more.explicitly_set = {"epochs"};
  train::run_training(more);
  CHECK(!fs::exists(run / "step-00000003"));
  CHECK(!fs::exists(run / ".step-00000003.ember-unlisted"));
  CHECK(!fs::exists(run / ".step-00000002.ember-unlisted"));
  CHECK(read_text(run / ".step-00000003.ember-unlisted.bak") == "not a marker");
  CHECK(train::open_checkpoint(run.string()).step == 4);
  // A marked step directory that holds a file of the user's loses only ember's files.
  train::write_step_marker(run.string(), "step-00000009");
  fs::create_directories(run / "step-00000009");
  write_text(run / "step-00000009" / "state.safetensors", "ember's");
  write_text(run / "step-00000009" / "notes.txt", "the user's");
  CHECK(train::remove_step_dir(run.string(), "step-00000009") ==
        std::vector<std::string>{"step-00000009/state.safetensors", ".step-00000009.ember-unlisted"});
  CHECK(read_text(run / "step-00000009" / "notes.txt") == "the user's");
  CHECK_THROWS_WITH(train::remove_step_dir(run.string(), "../etc"), Contains("is not a step directory's name"));
}

TEST_CASE("run directory: step directory names are exact", "[train][run_dir]") {
  for (const char* name : {"step-00000008", "step-123456789", "step-00000008-2", "step-00000008-17"})
    CHECK(train::is_step_dir_name(name));
  for (const char* name : {"step-by-step-notes", "step-00000024-keep", "step-0000008", "step-00000008-",
                           "step-00000008-2-3", "Step-00000008", "step-00000008x", "step-", "xstep-00000008"})
    CHECK_FALSE(train::is_step_dir_name(name));
}

TEST_CASE("run directory: output paths never name a run's own files", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_outputs");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  train::TrainConfig c = config(data, run);
  train::run_training(c);
  const std::string before = fingerprint(run);
  train::TrainConfig w = config(data, "");
  w.save_weights = (run / "checkpoint.json").string();
  CHECK_THROWS_WITH(train::run_training(w), "--save-weights '" + w.save_weights +
                                                "' is the checkpoint manifest of the run in '" + run.string() +
                                                "'; ember does not write other output over a run's own files: name "
                                                "another file");
  w.save_weights = (run / "step-00000002" / "model.safetensors").string();
  CHECK_THROWS_WITH(train::run_training(w), Contains("is inside the checkpoint directory"));
  train::TrainConfig m = config(data, "");
  m.metrics_path = (run / "evaluation.json").string();
  CHECK_THROWS_WITH(train::run_training(m), Contains("is the last evaluation of the run in"));
  CHECK_THROWS_WITH(train::write_run_report({run.string()}, (run / train::kMetricsFileName).string()),
                    "--out '" + (run / train::kMetricsFileName).string() + "' is the metrics stream of the run in '" +
                        run.string() + "'; ember does not write other output over a run's own files: name another "
                        "file");
  CHECK(fingerprint(run) == before);
  train::write_run_report({run.string()}, (run / train::kReportFileName).string());  // a report may
}

TEST_CASE("run directory: --overwrite keeps the earlier run's files until its first save", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_overwrite");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  train::TrainConfig c = config(data, run);
  train::run_training(c);
  REQUIRE(fs::exists(run / train::kEvaluationFileName));
  REQUIRE(fs::exists(run / train::kReportFileName));
  const std::string before = fingerprint(run);
  // A new run that diverges at its first step saves nothing: the earlier run stays whole.
  train::TrainConfig d = c;
  d.overwrite = true;
  d.optimizer = "sgd";
  d.lr = 1e30;
  CHECK_THROWS_WITH(train::run_training(d), Contains("training diverged"));
  CHECK(fingerprint(run) == before);
  // A new run that saves replaces all of it.
  train::TrainConfig n = c;
  n.overwrite = true;
  n.seed = 7;
  train::run_training(n);
  const std::string stream = read_text(run / train::kMetricsFileName);
  CHECK(stream.find("\"seed\":7") != std::string::npos);
  CHECK(stream.find("\"seed\":1,") == std::string::npos);
}

TEST_CASE("metrics stream: a second writer is refused before it can truncate, a planted link is refused",
          "[train][run_dir]") {
  TempDir tmp("ember_run_dir_metrics");
  const fs::path p = tmp.path / "m.jsonl";
  train::MetricsWriter first(p.string());
  first.write_line("{\"event\":\"config\"}");
  CHECK_THROWS_WITH(train::MetricsWriter(p.string()),
                    "cannot write metrics file '" + p.string() + "': another ember run is writing it (it holds the "
                    "file's lock); name another file, or wait for that run to end");
  first.write_line("{\"event\":\"step\"}");
  CHECK(read_text(p) == "{\"event\":\"config\"}\n{\"event\":\"step\"}\n");
  const fs::path victim = tmp.path / "victim.txt", link = tmp.path / "metrics.jsonl";
  write_text(victim, "keep me\n");
  fs::create_symlink(victim, link);
  for (train::MetricsOpen mode : {train::MetricsOpen::truncate, train::MetricsOpen::append})
    CHECK_THROWS_WITH(train::MetricsWriter(link.string(), mode), Contains("is a symbolic link to"));
  CHECK(read_text(victim) == "keep me\n");
  // /dev/null through a link: written to, never replaced.
  fs::create_symlink("/dev/null", tmp.path / "null.jsonl");
  train::MetricsWriter((tmp.path / "null.jsonl").string()).write_line("{}");
  CHECK(fs::is_symlink(tmp.path / "null.jsonl"));
}

TEST_CASE("metrics stream: replace mode keeps the old stream until commit", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_replace");
  const fs::path p = tmp.path / "metrics.jsonl";
  write_text(p, "{\"old\":1}\n");
  {
    train::MetricsWriter w(p.string(), train::MetricsOpen::replace);
    w.write_line("{\"new\":1}");
    CHECK(read_text(p) == "{\"old\":1}\n");
    w.commit();
    w.write_line("{\"new\":2}");
  }
  CHECK(read_text(p) == "{\"new\":1}\n{\"new\":2}\n");
  {
    train::MetricsWriter w(p.string(), train::MetricsOpen::replace);
    w.write_line("{\"lost\":1}");  // no commit: the run saved nothing
  }
  CHECK(read_text(p) == "{\"new\":1}\n{\"new\":2}\n");
  CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);  // no temporary file
}

TEST_CASE("checkpoint readers see a whole checkpoint while a run keeps saving", "[train][run_dir]") {
  TempDir tmp("ember_run_dir_readers");
  const fs::path data = make_dataset(tmp.path / "data"), run = tmp.path / "run";
  train::TrainConfig c = config(data, run);
  c.epochs = 1;
  train::run_training(c);
  // A writer thread saves new checkpoints of the run as fast as it can (each save removes the
  // previous step directory); readers load the directory meanwhile, and none may fail.
  const train::LoadedModel loaded = train::load_model(run.string());
  train::DataInfo d;
  d.channels = 1;
  d.image_size = 28;
  d.classes = loaded.classes;
  d.mean = loaded.mean;
  d.std = loaded.std;
  std::atomic<bool> done{false};
  std::atomic<int> saves{0};
  std::thread writer([&] {
    train::CheckpointWriter w(run.string(), train::open_checkpoint(run.string()).run, false, true);
    const io::TrainingState st = io::load_training_state(
        (run / train::open_checkpoint(run.string()).state.path).string());
    for (int64_t step = 10; !done; ++step) {
      io::TrainingState s = st;
      s.step = step;
      w.save(c, d, *loaded.model, s);
      ++saves;
    }
  });
  int reads = 0;
  std::string failure;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until || reads < 20) {
    try {
      (void)train::load_model(run.string());
    } catch (const Error& e) {
      failure = e.what();
      break;
    }
    ++reads;
  }
  done = true;
  writer.join();
  INFO(reads << " reads during " << saves << " saves");
  CHECK(failure.empty());
  CHECK(saves > 5);
  // When the writer ended, every step directory a reader held had been removed: only the named ones are left.
  const train::Manifest m = train::open_checkpoint(run.string());
  CHECK(m.step >= 10);
  std::vector<std::string> steps, named{fs::path(m.weights.path).parent_path().string()};
  if (m.has_best && fs::path(m.best.path).parent_path() != fs::path(m.weights.path).parent_path())
    named.push_back(fs::path(m.best.path).parent_path().string());
  for (const auto& e : fs::directory_iterator(run))
    if (train::is_step_dir_name(e.path().filename().string())) steps.push_back(e.path().filename().string());
  std::sort(steps.begin(), steps.end());
  std::sort(named.begin(), named.end());
  CHECK(steps == named);
}
