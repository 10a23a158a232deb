#pragma once
// Whole-file reads and crash-safe whole-file writes.
//
// Note [Atomic checkpoint writes]
// A checkpoint is only useful if a crash, a kill or a full disk in the middle of saving it never
// destroys the previous good one. write_file_atomic therefore never opens the target itself:
//   1. it creates a new temporary file in the *same directory* (rename is only atomic within one
//      filesystem) with O_CREAT | O_EXCL and a unique name, so two writers never share it;
//   2. writes everything, then fsync()s the file, so its data is on disk before its name is;
//   3. rename()s it over the target: readers see either the old file or the complete new one;
//   4. fsync()s the directory, so the rename itself survives a power loss.
// On any failure (including an exception thrown by the caller's writer) the temporary file is
// closed and unlinked and the target is untouched. A kill -9 between 1 and 3 can leave a stray
// ".<name>.tmp-*" file beside the target, but never a damaged target; remove_stale_temp_files
// removes such files (the trainer calls it on a checkpoint directory before it writes there).
//
// One failure comes after the point of no return: if syncing the directory fails after the rename,
// the new file is in place (and complete) but the error is still thrown, because its durability
// across a power loss is not assured.
//
// Every error is an ember::Error that starts with the path and ends with strerror(errno):
//   "/ckpt/model.safetensors: cannot write temporary file: No space left on device"
//
// Limits: the new file gets the default mode (0666 & ~umask), not the mode of the file it
// replaces; if the target is a symlink the link itself is replaced, not the file it points to.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::io {

// The sink a write_file_atomic writer callback writes into. Buffers small writes; large writes
// go straight to the file. Not copyable; only write_file_atomic creates one.
class FileWriter {
 public:
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Appends n bytes. Throws ember::Error ("<target path>: cannot write temporary file: ...").
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Bytes written so far.
  uint64_t bytes_written() const { return written_; }
  // The target path (not the temporary one): for error messages.
  const std::string& path() const { return path_; }

 private:
  friend void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& writer);
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void flush();           // writes out the buffer
  void write_raw(const void* data, size_t n);

  int fd_;
  std::string path_;
  std::vector<char> buffer_;
  uint64_t written_ = 0;
  bool inject_enospc_ = false;  // EMBER_FAULT=enospc-file:N (Note [Fault injection] in io/fault.h)
};

// Replaces `path` atomically with whatever `writer` writes (see Note [Atomic checkpoint writes]).
// An exception thrown by `writer` propagates unchanged after the temporary file is removed.
void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& writer);
// Replaces `path` atomically with `bytes`.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::string& path, std::string_view bytes);

// Removes the ".<name>.tmp-*" files that an interrupted write_file_atomic left in `dir` (not in
// its subdirectories). Returns how many it removed.
int remove_stale_temp_files(const std::string& dir);

// Note [Reading untrusted files]
// Every file ember reads may be hostile or odd: a data tree, a weights file or a run directory is
// the user's, and a name says nothing about what is behind it. The readers therefore
//   1. stat() the path before opening it and refuse anything that is not a regular file (after
//      following symlinks): a FIFO's open() blocks until a writer appears (it hung `ember
//      inspect` and the data loader), /dev/zero or /dev/urandom never end, a socket cannot be
//      opened; the open itself uses O_NONBLOCK so a path swapped for a FIFO after the stat does
//      not block either, and fstat() checks again;
//   2. check the size against a cap for what the file should be before reading it whole (an
//      image file, a manifest; docs/data.md "Limits"), and read headers before bodies (images:
//      data/image.h; safetensors: io/safetensors.h), so that a multi-gigabyte file or a crafted
//      header is refused by its first bytes, in bounded time and memory;
//   3. name the file in every error, an allocation failure included.

// Throws ember::Error "<path>: is a FIFO (named pipe), not a regular file; ..." (or a device, a
// socket, a directory; "no such file") unless `path` is a regular file after following symlinks;
// it opens nothing. For readers that open the file through another library (stdio, zlib).
void check_regular_file(const std::string& path);

// A file opened for reading, with positioned reads that either fill the whole buffer or throw.
// Opening fails with a clear error naming the path for a missing file, a directory, a FIFO, a
// device or a socket (Note [Reading untrusted files]), or an unreadable file.
class FileReader {
 public:
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Size in bytes when the file was opened.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset` into dst. Throws ("<path>: unexpected end of file reading
  // <what> ...") when the file ends first, or with strerror on an I/O error.
  void read_at(uint64_t offset, void* dst, size_t n, std::string_view what) const;

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// The whole content of `path`, at most max_bytes of it: a larger file is an error naming the
// path, its size and `what` the limit is for ("a checkpoint manifest"), raised before any byte is
// read. Throws ember::Error, naming the path, for a file that is not regular (as FileReader), an
// unreadable file, an I/O error or a failed allocation.
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                               std::string_view what = "this file");

}  // namespace ember::io
