// What ember owns in a run directory (Note [Run directory ownership] in train/run_dir.h).

#include "run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../core/error.h"
#include "../io/atomic_file.h"
#include "checkpoint.h"
#include "run_report.h"

namespace ember::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarkerSuffix = ".ember-unlisted";
// The files of a step directory that are ember's.
const std::vector<std::string> kStepFiles = {"model.safetensors", "state.safetensors"};
// A run directory's own files besides the step directories.
const char* const kRunFiles[] = {kManifestName, kMetricsFileName, kEvaluationFileName, kReportFileName};

bool digits(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// lstat: 0 for nothing there.
mode_t kind_at(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mode : 0;
}

// "a symbolic link to 'x'", "a FIFO", ...: for a run file that is not a regular file.
std::string describe(const fs::path& p, mode_t mode) {
  std::error_code ec;
  return S_ISLNK(mode) ? "a symbolic link to '" + fs::read_symlink(p, ec).string() + "'" : io::file_kind(mode);
}

// Whether `file`'s first line is the `config` event ember writes first in a metrics stream.
bool is_ember_metrics(const fs::path& file) {
  try {
    io::FileReader f(file.string());
    std::string head(static_cast<size_t>(std::min<uint64_t>(f.size(), 1 << 20)), '\0');
    f.read_at(0, head.data(), head.size(), "the first line");
    const size_t nl = head.find('\n');
    if (nl == std::string::npos) return false;
    const nlohmann::json j = nlohmann::json::parse(head.substr(0, nl));
    return j.is_object() && j.value("event", "") == "config" && j.contains("environment");
  } catch (const std::exception&) {
    return false;
  }
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string join_names(const std::vector<std::string>& names, size_t at_most) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > at_most) s += " and " + std::to_string(names.size() - at_most) + " more";
  return s;
}

bool is_step_dir_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return false;
  const size_t dash = name.find('-', 5);
  const size_t end = dash == std::string::npos ? name.size() : dash;
  if (end - 5 < 8 || !digits(name, 5, end)) return false;
  return dash == std::string::npos || digits(name, dash + 1, name.size());
}

std::string step_marker_name(const std::string& step) { return "." + step + kMarkerSuffix; }

void write_step_marker(const std::string& dir, const std::string& step) {
  const fs::path marker = fs::path(dir) / step_marker_name(step);
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == EEXIST) return;  // marked already (an earlier attempt)
    EMBER_THROW(marker.string(), ": cannot write the marker of a checkpoint directory: ", std::strerror(errno));
  }
  const std::string text = "ember: " + step + "/ is a checkpoint directory that " + kManifestName +
                           " does not list; the next ember run that writes here removes it\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  EMBER_CHECK(ok, marker.string(), ": cannot write the marker of a checkpoint directory: ", std::strerror(err));
  // The marker is on disk before anything it speaks for.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (::fsync(dfd) != 0) {
      // A filesystem that cannot sync a directory: as durable as it allows.
    }
    ::close(dfd);
  }
}

RunDirSurvey survey_run_dir(const std::string& dir, RunDirUse use) {
  RunDirSurvey s;
  if (!fs::is_directory(dir)) return s;
  const fs::path d(dir);
  for (const char* name : kRunFiles) {
    const mode_t mode = kind_at(d / name);
    EMBER_CHECK(mode == 0 || S_ISREG(mode), "--save: '", (d / name).string(), "' is ", describe(d / name, mode),
                "; a run directory's own files must be regular files, and ember neither writes through nor "
                "replaces anything else (remove it, or save into another directory)");
  }
  if (kind_at(d / kManifestName) != 0) {
    try {
      const Manifest m = read_manifest(dir);
      s.manifest = true;
      s.manifest_run = m.run;
      s.named.push_back(fs::path(m.weights.path).parent_path().string());
      if (m.has_best && !contains(s.named, fs::path(m.best.path).parent_path().string()))
        s.named.push_back(fs::path(m.best.path).parent_path().string());
    } catch (const Error&) {
      s.manifest = false;  // damaged: it names nothing (a new run needs --overwrite for it anyway)
    }
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t suffix = name.size() > std::strlen(kMarkerSuffix) ? name.size() - std::strlen(kMarkerSuffix) : 0;
    if (is_step_dir_name(name) && S_ISDIR(kind_at(it->path()))) {
      if (contains(s.named, name)) continue;
      if (kind_at(d / step_marker_name(name)) != 0) s.unlisted.push_back(name);
      else if (!s.manifest) s.orphans.push_back(name);
    } else if (suffix > 1 && name[0] == '.' && name.compare(suffix, std::string::npos, kMarkerSuffix) == 0 &&
               is_step_dir_name(name.substr(1, suffix - 1))) {
      const std::string step = name.substr(1, suffix - 1);
      if (contains(s.named, step) || !S_ISDIR(kind_at(d / step))) s.stray_markers.push_back(name);
    }
  }
  for (const char* name : {kMetricsFileName, kEvaluationFileName, kReportFileName}) {
    if (kind_at(d / name) == 0) continue;
    s.run_files.push_back(name);
    if (!s.manifest && !(std::string(name) == kMetricsFileName && is_ember_metrics(d / name)))
      s.foreign_files.push_back(name);
  }
  for (auto* v : {&s.unlisted, &s.stray_markers, &s.orphans}) std::sort(v->begin(), v->end());
  if (use == RunDirUse::new_run) {
    EMBER_CHECK(s.orphans.empty(), "--save: '", dir, "' holds ", s.orphans.size(), " checkpoint director",
                s.orphans.size() == 1 ? "y" : "ies", " (", join_names(s.orphans), ") but no ", kManifestName,
                " that names them: they may be complete checkpoints whose manifest was lost, and ember does not "
                "remove them; move them away, or pass --overwrite to replace them with this run");
    EMBER_CHECK(s.foreign_files.empty(), "--save: '", dir, "' holds ", join_names(s.foreign_files), " but no ",
                kManifestName, ", so nothing says ", s.foreign_files.size() == 1 ? "it is" : "they are",
                " ember's; ember does not replace ", s.foreign_files.size() == 1 ? "it" : "them",
                ": move ", s.foreign_files.size() == 1 ? "it" : "them",
                " away, or pass --overwrite to replace with this run's");
  }
  return s;
}

std::vector<std::string> remove_step_dir(const std::string& dir, const std::string& step) {
  EMBER_CHECK(is_step_dir_name(step), "remove_step_dir: '", step, "' is not a step directory's name");
  std::vector<std::string> removed;
  const fs::path d = fs::path(dir) / step, marker = fs::path(dir) / step_marker_name(step);
  auto drop_marker = [&] {
    if (::unlink(marker.c_str()) == 0) removed.push_back(marker.filename().string());
  };
  if (!S_ISDIR(kind_at(d))) {  // gone already, or replaced by something that is not ember's
    drop_marker();
    return removed;
  }
  write_step_marker(dir, step);  // a crash from here on leaves it marked
  for (const std::string& f : kStepFiles)
    if (S_ISREG(kind_at(d / f)) && ::unlink((d / f).c_str()) == 0) removed.push_back(step + "/" + f);
  for (const std::string& t : io::remove_stale_temp_files(d.string(), kStepFiles)) removed.push_back(step + "/" + t);
  if (::rmdir(d.c_str()) == 0) {
    removed.push_back(step + "/");
  } else {
    std::vector<std::string> left;
    std::error_code ec;
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      left.push_back(it->path().filename().string());
    std::sort(left.begin(), left.end());
    std::fprintf(stderr, "ember train: left %s in place: it holds files that ember did not write (%s)\n",
                 d.string().c_str(), join_names(left).c_str());
  }
  drop_marker();
  return removed;
}

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path x = fs::weakly_canonical(fs::absolute(a), ea), y = fs::weakly_canonical(fs::absolute(b), eb);
  return !ea && !eb && x == y;
}

void check_output_path(const std::string& option, const std::string& path, const std::vector<std::string>& run_dirs,
                       const std::string& allowed) {
  const fs::path p(path);
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string name = p.filename().string();
  auto is_run_dir = [&](const fs::path& d) {
    if (kind_at(d / kManifestName) != 0) return true;
    return std::any_of(run_dirs.begin(), run_dirs.end(),
                       [&](const std::string& r) { return !r.empty() && same_path(d.string(), r); });
  };
  if (is_run_dir(parent)) {
    const char* what = nullptr;
    if (name == kManifestName) what = "the checkpoint manifest";
    else if (name == kMetricsFileName) what = "the metrics stream";
    else if (name == kEvaluationFileName) what = "the last evaluation";
    else if (name == kReportFileName) what = "the report";
    else if (is_step_dir_name(name)) what = "a checkpoint directory";
    else if (io::parse_temp_name(name) || name.find(kMarkerSuffix) != std::string::npos) what = "a file of a save";
    if (what != nullptr && name != allowed)
      EMBER_THROW(option, " '", path, "' is ", what, " of the run in '", parent.string(),
                  "'; ember does not write other output over a run's own files: name another file");
  }
  const fs::path up = parent.has_parent_path() ? parent.parent_path() : fs::path(".");
  if (is_step_dir_name(parent.filename().string()) && is_run_dir(up))
    EMBER_THROW(option, " '", path, "' is inside the checkpoint directory '", parent.string(), "' of the run in '",
                up.string(), "'; ember does not write other output over a run's own files: name another file");
}

}  // namespace ember::train
