#include "report.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "../core/error.h"

namespace ember::train {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  EMBER_CHECK(file_ != nullptr, "cannot open metrics file '", path, "': ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write_line(const std::string& json_object) {
  if (file_ == nullptr) return;
  const bool ok = std::fputs(json_object.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  EMBER_CHECK(ok, "cannot write metrics file '", path_, "': ", std::strerror(errno));
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

void Progress::step(int64_t step, double loss, double accuracy, double images_per_sec) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(steps_ - step) : NAN;
  if (tty_) {
    // Redraw at most 10 times a second.
    if (step != steps_ && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
    last_draw_ = now;
    const int width = 24;
    const int filled = steps_ > 0 ? static_cast<int>(width * step / steps_) : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r\033[Kepoch %d/%d [%s] %lld/%lld loss %.4f acc %.2f%% %.0f img/s ETA %s", epoch_, epochs_,
                 bar.c_str(), static_cast<long long>(step), static_cast<long long>(steps_), loss, 100 * accuracy,
                 images_per_sec, format_duration(eta).c_str());
    std::fflush(out_);
  } else if (step % every_ == 0 || step == steps_) {
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
