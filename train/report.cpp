#include "report.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "../core/error.h"
#include "../io/atomic_file.h"
#include "../io/fault.h"

namespace ember::train {

MetricsWriter::MetricsWriter(const std::string& path, MetricsOpen mode) : path_(path) {
  if (path.empty()) return;
  const io::OutputTarget target = io::inspect_output(path);  // throws for what is refused
  if (target.kind == io::OutputKind::stream) {
    EMBER_CHECK(mode == MetricsOpen::truncate, path, ": a run directory's metrics stream must be a regular file, "
                "and this is a character device, a FIFO or a link to one");
    fd_ = io::open_output_stream(path);
    regular_ = false;
    return;
  }
  if (mode == MetricsOpen::replace && target.kind == io::OutputKind::regular) {
    pending_ = std::make_unique<io::TempFile>(path, O_APPEND);
    fd_ = pending_->fd();
    return;
  }
  const int access = mode == MetricsOpen::append ? O_RDWR : O_WRONLY;
  const int fd = ::open(path.c_str(), access | O_CREAT | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    EMBER_CHECK(err != ELOOP, "cannot open metrics file '", path, "': it became a symbolic link after it was checked; "
                "ember does not write through it");
    EMBER_THROW("cannot open metrics file '", path, "': ", std::strerror(err));
  }
  fd_ = fd;
  struct stat st {};
  EMBER_CHECK(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), "cannot open metrics file '", path,
              "': it is no longer a regular file");
  // Before anything is cut: a second writer (another run, or this file named twice) stops here.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    EMBER_THROW("cannot write metrics file '", path, "': another ember run is writing it (it holds the file's lock); "
                "name another file, or wait for that run to end");
  off_t end = 0;
  if (mode == MetricsOpen::append) {
    // Continue after the last newline: scan back from the end in blocks.
    end = ::lseek(fd_, 0, SEEK_END);
    char block[4096];
    while (end > 0) {
      const off_t start = end > static_cast<off_t>(sizeof block) ? end - static_cast<off_t>(sizeof block) : 0;
      const ssize_t n = ::pread(fd_, block, static_cast<size_t>(end - start), start);
      EMBER_CHECK(n == end - start, "cannot read metrics file '", path, "': ", std::strerror(errno));
      const char* nl = static_cast<const char*>(memrchr(block, '\n', static_cast<size_t>(n)));
      if (nl != nullptr) {
        end = start + (nl - block) + 1;
        break;
      }
      end = start;
    }
  }
  EMBER_CHECK(::ftruncate(fd_, end) == 0, "cannot write metrics file '", path, "': ", std::strerror(errno));
  size_ = static_cast<uint64_t>(end);
}

MetricsWriter::~MetricsWriter() {
  if (pending_) return;  // the TempFile closes and removes the uncommitted stream
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::commit() {
  if (!pending_) return;
  const std::unique_ptr<io::TempFile> stream = std::move(pending_);
  try {
    stream->commit(false);  // renamed, still open: the lines keep going to it
  } catch (...) {
    if (stream->fd() >= 0) fd_ = -1;  // not renamed: the TempFile closes and removes it
    throw;
  }
}

void MetricsWriter::write_line(const std::string& json_object) {
  if (fd_ < 0) return;
  const std::string line = json_object + "\n";
  // EMBER_FAULT=enospc-metrics:N: the N-th line stops half-way on a "full disk" (io/fault.h).
  const bool inject = io::fault_enospc("metrics");
  const size_t want = inject ? line.size() / 2 : line.size();
  size_t done = 0;
  int err = 0;
  while (done < want) {
    // O_APPEND: every write lands at the end, where the last whole line ends.
    const ssize_t w = ::write(fd_, line.data() + done, want - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (inject && err == 0) err = ENOSPC;
  if (err != 0) {
    // Whole lines or nothing: cut the partial line off again (best effort on a full disk).
    if (regular_ && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      // Nothing more can be done; the write error below is the one to report.
    }
    EMBER_THROW("cannot write metrics file '", path_, "': ", std::strerror(err));
  }
  size_ += line.size();
}

std::string format_duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
  }
  return buf;
}

Progress::Progress(bool quiet, std::FILE* out) : quiet_(quiet), tty_(isatty(fileno(out)) != 0), out_(out) {}

void Progress::start_epoch(int epoch, int epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  epoch_start_ = last_draw_ = std::chrono::steady_clock::now();
  every_ = std::max<int64_t>(1, steps / 10);
}

bool Progress::due(int64_t step) const {
  if (quiet_) return false;
  // On a terminal: redraw at most 10 times a second; elsewhere a line every tenth of an epoch.
  if (tty_)
    return step == steps_ || std::chrono::duration<double>(std::chrono::steady_clock::now() - last_draw_).count() >= 0.1;
  return step % every_ == 0 || step == steps_;
}

void Progress::step(int64_t step, double loss, double accuracy, double images_per_sec) {
  if (!due(step)) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(steps_ - step) : NAN;
  if (tty_) {
    last_draw_ = now;
    const int width = 24;
    const int filled = steps_ > 0 ? static_cast<int>(width * step / steps_) : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r\033[Kepoch %d/%d [%s] %lld/%lld loss %.4f acc %.2f%% %.0f img/s ETA %s", epoch_, epochs_,
                 bar.c_str(), static_cast<long long>(step), static_cast<long long>(steps_), loss, 100 * accuracy,
                 images_per_sec, format_duration(eta).c_str());
    std::fflush(out_);
  } else {
    std::fprintf(out_, "epoch %d/%d step %lld/%lld loss %.4f acc %.2f%% %.0f img/s ETA %s\n", epoch_, epochs_,
                 static_cast<long long>(step), static_cast<long long>(steps_), loss, 100 * accuracy, images_per_sec,
                 format_duration(eta).c_str());
    std::fflush(out_);
  }
}

void Progress::end_epoch() {
  if (!quiet_ && tty_) std::fprintf(out_, "\n");
}

}  // namespace ember::train
