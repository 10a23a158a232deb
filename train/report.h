#pragma once
// What a training run tells the outside world: a progress display for people (a redrawn bar on
// a terminal, plain periodic lines otherwise) and a JSON-lines metrics file for programs.
// The metrics schema is documented in docs/metrics.md.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

namespace ember::train {

// How a MetricsWriter opens its file: emptied (a new run), or appended to (a resumed run writing
// into the file it wrote before).
enum class MetricsOpen { truncate, append };

// One JSON-lines file; each event is written as one whole line or not at all: a write that fails
// part-way (a full disk) is cut back to the end of the previous line before the error is thrown.
class MetricsWriter {
 public:
  // Empty path: a writer that writes nothing. append: after the file's last whole line (a partial
  // last line, which only a crash in the middle of a write leaves, is cut off).
  explicit MetricsWriter(const std::string& path, MetricsOpen mode = MetricsOpen::truncate);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  bool enabled() const { return fd_ >= 0; }
  // `json_object` must be one JSON object (no newline); it is written as a line with one write().
  void write_line(const std::string& json_object);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole lines written so far
  std::string path_;
};

// Progress for people. On a terminal: one line redrawn in place (epoch, step/total, loss,
// accuracy, images/s, ETA). Otherwise: a plain line every `every` steps. quiet: nothing but the
// lines the caller prints itself.
class Progress {
 public:
  Progress(bool quiet, std::FILE* out = stderr);
  void start_epoch(int epoch, int epochs, int64_t steps);
  // Whether step(step, ...) prints a line now: callers read what it shows (values on a device)
  // only then.
  bool due(int64_t step) const;
  void step(int64_t step, double loss, double accuracy, double images_per_sec);
  void end_epoch();
  bool is_terminal() const { return tty_; }

 private:
  bool quiet_, tty_;
  std::FILE* out_;
  int epoch_ = 0, epochs_ = 0;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t every_ = 100;
};

// "1m23s", "45.2s"
std::string format_duration(double seconds);

}  // namespace ember::train
