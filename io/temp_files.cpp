// Temporary files beside their targets: names, the signal table, stale-file cleanup
// (Note [Temporary files] in io/atomic_file.h).

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string_view>

#include "../core/error.h"
#include "atomic_file.h"

namespace ember::io {

namespace fs = std::filesystem;

namespace {

// ---- the signal table -------------------------------------------------------------------------
// A fixed table, so that a signal handler can walk it without locks or allocation: an entry is
// free (0), being filled (1) or listed (2); only listed entries are unlinked. std::atomic<int> is
// lock-free here, which makes its loads async-signal-safe.
constexpr int kTableSize = 64;
constexpr size_t kPathBytes = 4096;
struct Entry {
  std::atomic<int> state{0};
  char path[kPathBytes];
};
Entry g_table[kTableSize];
static_assert(std::atomic<int>::is_always_lock_free);

// Lists `path`; returns its slot, or -1 when the table is full or the path too long (the file is
// then removed by the next write of its target instead).
int list_temp(const std::string& path) {
  if (path.size() >= kPathBytes) return -1;
  for (int i = 0; i < kTableSize; ++i) {
    int expected = 0;
    if (g_table[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_table[i].path, path.c_str(), path.size() + 1);
      g_table[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unlist_temp(int slot) {
  if (slot >= 0) g_table[slot].state.store(0, std::memory_order_release);
}

extern "C" void on_fatal_signal(int sig) {
  remove_temp_files_now();
  // SA_RESETHAND put the default action back: the signal, raised again, ends the process as it
  // would have without this handler (exit status, core dump for SIGQUIT).
  ::raise(sig);
}

// ---- names ------------------------------------------------------------------------------------

std::string parent_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

// ".<name>.tmp-<pid>-<n>-<r>": the process id, a per-process counter and random digits, so no
// two writers (threads or processes) pick the same name; O_EXCL guards against the rest.
std::string temp_name_for(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  const std::string base = fs::path(target).filename().string();
  const uint64_t n = counter.fetch_add(1);
  const std::string name = "." + base + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n) + "-" +
                           std::to_string((salt + n * 0x9e3779b97f4a7c15ULL) % 1000000007ULL);
  return (fs::path(parent_of(target)) / name).string();
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether a process with this id runs (one of another user's counts: kill answers EPERM).
bool process_alive(long pid) {
  if (pid <= 0) return false;
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

bool parse_temp_name(const std::string& name, std::string* target, long* pid) {
  std::string_view v = name;
  if (v.size() < 2 || v[0] != '.') return false;
  std::string_view groups[3];
  for (int k = 2; k >= 0; --k) {
    const size_t dash = v.rfind('-');
    if (dash == std::string_view::npos) return false;
    groups[k] = v.substr(dash + 1);
    if (!all_digits(groups[k])) return false;
    v = v.substr(0, dash);
  }
  constexpr std::string_view kTmp = ".tmp";
  if (v.size() <= kTmp.size() + 1 || v.substr(v.size() - kTmp.size()) != kTmp) return false;
  v.remove_suffix(kTmp.size());
  v.remove_prefix(1);
  if (target != nullptr) *target = std::string(v);
  if (pid != nullptr) *pid = std::stol(std::string(groups[0]));
  return true;
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir, const std::vector<std::string>& targets) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string target;
    long pid = 0;
    if (!parse_temp_name(name, &target, &pid)) continue;
    if (!targets.empty() && std::find(targets.begin(), targets.end(), target) == targets.end()) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || process_alive(pid)) continue;
    if (::unlink(it->path().c_str()) == 0) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

void remove_temp_files_now() noexcept {
  for (Entry& e : g_table)
    if (e.state.load(std::memory_order_acquire) == 2) ::unlink(e.path);
}

void remove_temp_files_on_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) continue;
      if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;  // somebody else's
      struct sigaction sa {};
      sa.sa_handler = on_fatal_signal;
      sa.sa_flags = SA_RESETHAND;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

// ---- TempFile ---------------------------------------------------------------------------------

TempFile::TempFile(const std::string& target, int flags) : target_(target) {
  EMBER_CHECK(!target.empty(), "TempFile: empty path");
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    path_ = temp_name_for(target);
    // Listed before it exists, so that no moment has the file on disk and not in the table.
    slot_ = list_temp(path_);
    // 0666 so the umask decides the mode of a new file, as for any newly created file.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, 0666);
    if (fd_ < 0) {
      const int err = errno;
      unlist_temp(slot_);
      slot_ = -1;
      if (err != EEXIST)
        EMBER_THROW(target, ": cannot create temporary file in '", parent_of(target), "': ", std::strerror(err));
    }
  }
  if (fd_ < 0) EMBER_THROW(target, ": cannot create a unique temporary file: ", std::strerror(EEXIST));
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());  // best effort: an error being thrown is the one worth reporting
  unlist_temp(slot_);
}

void TempFile::commit(bool close_first) {
  if (close_first) {
    // close() can report a deferred write error (NFS, quota): it must succeed before the rename.
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) EMBER_THROW(target_, ": cannot close temporary file: ", std::strerror(errno));
  }
  if (::rename(path_.c_str(), target_.c_str()) != 0)
    EMBER_THROW(target_, ": cannot rename temporary file over it: ", std::strerror(errno));
  committed_ = true;
  fd_ = -1;  // closed above, or the caller's from now on
  unlist_temp(slot_);
  slot_ = -1;
  // fsync on the directory makes the rename durable. Some filesystems cannot fsync a directory
  // (EINVAL); the rename has happened and is as durable as that filesystem allows.
  const std::string dir = parent_of(target_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) EMBER_THROW(target_, ": cannot open directory '", dir, "' to sync the rename: ", std::strerror(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    EMBER_THROW(target_, ": cannot sync directory '", dir, "' after the rename: ", std::strerror(err));
}

}  // namespace ember::io
