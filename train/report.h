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

namespace ember::io {
class TempFile;
}

namespace ember::train {

// How a MetricsWriter opens its file (Note [The metrics stream]).
enum class MetricsOpen {
  truncate,  // --metrics FILE: emptied for a new run (a character device or a FIFO: written to)
  append,    // a run directory's own stream, continued: after its last whole line
  replace,   // a run directory's own stream, for a new run where one exists: the new stream is
             // written beside it and renamed over it by commit() (the run's first save)
};

// Note [The metrics stream]
// A metrics file is protected as a checkpoint is. Its path is looked at first (Note [What an
// output path may be] in io/atomic_file.h): a symlink that leads to a file, a directory, a block
// device or a socket is refused; a character device or a FIFO (--metrics /dev/stdout) is written
// in place. A regular file is opened with O_NOFOLLOW (a link planted after that look is refused,
// never followed) and O_APPEND, and then locked (flock, exclusive): a second writer of the same
// file is refused before it can truncate a live run's stream; only then is a new run's file
// emptied. A run directory's stream is opened under the directory's lock too, after the
// directory's own files were checked (train/run_dir.h). A new run in a directory that holds an
// earlier run's stream (--overwrite) does not touch it: its events go to a temporary file beside
// it (Note [Temporary files] in io/atomic_file.h), renamed over the old stream at the new run's
// first save, so a run that stops before it saves anything leaves the old history as it was.
// Each event is written as one whole line or not at all: a write that fails part-way (a full
// disk) is cut back to the end of the previous line before the error is thrown.
class MetricsWriter {
 public:
  // Empty path: a writer that writes nothing. Throws ember::Error naming the path for a target
  // that is refused, another writer's file, or a file that cannot be opened.
  explicit MetricsWriter(const std::string& path, MetricsOpen mode = MetricsOpen::truncate);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  bool enabled() const { return fd_ >= 0; }
  // `json_object` must be one JSON object (no newline); it is written as a line with one write().
  void write_line(const std::string& json_object);
  // MetricsOpen::replace: puts the new stream in the old one's place (nothing otherwise).
  void commit();

 private:
  int fd_ = -1;
  bool regular_ = true;  // false: a character device or a FIFO, written in place
  uint64_t size_ = 0;    // bytes of whole lines written so far
  std::string path_;
  std::unique_ptr<io::TempFile> pending_;  // MetricsOpen::replace until commit()
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
