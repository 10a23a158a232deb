#pragma once
// Whole-file reads and crash-safe whole-file writes.
//
// Note [Atomic checkpoint writes]
// A checkpoint is only useful if a crash, a kill or a full disk in the middle of saving it never
// destroys the previous good one. write_file_atomic therefore never opens a file it replaces:
//   1. it creates a new temporary file in the *same directory* (rename is only atomic within one
//      filesystem) with O_CREAT | O_EXCL and a unique name, so two writers never share it;
//   2. writes everything, then fsync()s the file, so its data is on disk before its name is;
//   3. rename()s it over the target: readers see either the old file or the complete new one;
//   4. fsync()s the directory, so the rename itself survives a power loss.
// (A character device or a FIFO is written in place instead: Note [What an output path may be].)
// On any failure (including an exception thrown by the caller's writer) the temporary file is
// closed and unlinked and the target is untouched. A kill -9 between 1 and 3 can leave a stray
// temporary file beside the target, but never a damaged target (Note [Temporary files]).
//
// One failure comes after the point of no return: if syncing the directory fails after the rename,
// the new file is in place (and complete) but the error is still thrown, because its durability
// across a power loss is not assured.
//
// Every error is an ember::Error that starts with the path and ends with strerror(errno):
//   "/ckpt/model.safetensors: cannot write temporary file: No space left on device"
//
// Note [What an output path may be]
// Every writer of ember's (write_file_atomic and the metrics stream, train/report.h) looks at its
// target with lstat before it writes (inspect_output), and never writes through or replaces
// anything that is not a regular file:
//   nothing                   a new regular file, 0666 & ~umask
//   a regular file            replaced by temporary file + rename; the new file keeps the old one's
//                             permission bits, and its owner and group where the process may set them
//   a character device        written in place (/dev/null, a terminal): opened without O_CREAT or
//                             O_TRUNC, so the node itself is never replaced; not atomic
//   a FIFO                    written in place when a reader has it open (opened non-blocking, so
//                             a FIFO without a reader is an error, never a hang)
//   a symbolic link           written in place when it leads to a character device or a FIFO
//                             (/dev/stdout, a shell's /dev/fd/N); refused when it leads to anything
//                             else: ember does not write through a link to a file, nor replace the
//                             link
//   a directory, a block device, a socket    refused
// A refusal is an ember::Error that names the path and what it is:
//   "out/model.onnx: is a symbolic link to '/etc/passwd'; ember writes through a link only to a
//    character device or a FIFO, never to a file: name the file itself"
// As root, `ember export RUN /dev/null` therefore writes to /dev/null and leaves the device node
// as it was.
//
// Note [Temporary files]
// A temporary file is named ".<target name>.tmp-<pid>-<n>-<r>" (the writer's process id, a counter
// and random digits) and lives beside its target. Nothing else is ever taken for one: cleanup
// matches this exact form, a regular file, and a <pid> that is not a running process (a live
// writer's file is left alone). Three things remove them:
//   - the writer itself, on every error (write_file_atomic's catch);
//   - a signal: while a temporary file exists it is listed in a fixed table that
//     remove_temp_files_now() (async-signal-safe) empties; remove_temp_files_on_signals() installs
//     handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that call it and then end the process with
//     the same signal, and `ember train`'s own interrupt handler calls it before a hard exit;
//   - the next write of the same target (write_file_atomic calls remove_stale_temp_files for its
//     target's name), and a checkpoint directory's writer for every name in its directory: what
//     a SIGKILL or a power loss left.

#include <sys/types.h>

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
  FileWriter(int fd, std::string path, bool in_place) : fd_(fd), path_(std::move(path)), in_place_(in_place) {}
  void flush();           // writes out the buffer
  void write_raw(const void* data, size_t n);

  int fd_;
  std::string path_;
  std::vector<char> buffer_;
  uint64_t written_ = 0;
  bool in_place_ = false;       // writing straight into a character device or a FIFO
  bool inject_enospc_ = false;  // EMBER_FAULT=enospc-file:N (Note [Fault injection] in io/fault.h)
};

// What is at an output path, as a writer sees it (Note [What an output path may be]).
enum class OutputKind {
  missing,  // nothing: a new file is made
  regular,  // a regular file: replaced
  stream,   // a character device or a FIFO, or a symlink to one: written in place
};
struct OutputTarget {
  OutputKind kind = OutputKind::missing;
  mode_t mode = 0;  // a regular file's st_mode
  uid_t uid = 0;
  gid_t gid = 0;
};
// "a directory", "a FIFO (named pipe)", "a block device", ...: what a file of this st_mode is, for messages.
std::string file_kind(mode_t mode);
// lstat's answer for `path`; throws ember::Error naming the path and what it is for a target that
// is refused (a directory, a block device, a socket, a link that leads to none of the streams).
OutputTarget inspect_output(const std::string& path);

// Opens a stream target (OutputKind::stream) for writing in place: without O_CREAT or O_TRUNC,
// non-blocking while opening (a FIFO without a reader is an error, never a wait), and checked
// again after the open. Returns the descriptor (blocking); throws ember::Error naming the path.
int open_output_stream(const std::string& path);

// Replaces `path` atomically with whatever `writer` writes (see Note [Atomic checkpoint writes]);
// a stream target is written in place (Note [What an output path may be]).
// An exception thrown by `writer` propagates unchanged after the temporary file is removed.
void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& writer);
// Replaces `path` atomically with `bytes`.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::string& path, std::string_view bytes);

// A temporary file beside `target`, created with O_CREAT | O_EXCL and named as Note [Temporary
// files] says, listed for removal on signals while it exists. The destructor closes and unlinks it
// unless commit() renamed it over the target.
class TempFile {
 public:
  // `flags`: added to O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC (O_APPEND, say). Throws
  // ember::Error naming the target when the directory refuses the file.
  explicit TempFile(const std::string& target, int flags = 0);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Closes the file (reporting a deferred write error) when close_first, then renames it over the
  // target and syncs the directory. After it, the file is the target's and is no longer listed;
  // without close_first it stays open and fd() (read before) is the caller's to close.
  void commit(bool close_first = true);

 private:
  int fd_ = -1;
  int slot_ = -1;  // its entry in the signal table, -1 when the table was full
  std::string target_, path_;
  bool committed_ = false;
};

// Whether `name` (a file name, no folder) is a temporary file name of Note [Temporary files];
// its target's name and the writer's process id go to the out-parameters.
bool parse_temp_name(const std::string& name, std::string* target = nullptr, long* pid = nullptr);
// Removes the temporary files in `dir` (not in its subdirectories) that Note [Temporary files]
// recognises as stale: exact names, regular files, writers that have ended. With `targets`, only
// those for these target names. Returns the names it removed.
std::vector<std::string> remove_stale_temp_files(const std::string& dir, const std::vector<std::string>& targets = {});
// Unlinks every temporary file this process has listed (TempFile). Async-signal-safe.
void remove_temp_files_now() noexcept;
// Handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that call remove_temp_files_now() and then end
// the process by the same signal, for each signal whose disposition is the default (one that
// somebody handles or ignores is left as it is). Once per process; `ember` calls it first thing.
void remove_temp_files_on_signals();

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
// Throws read_file's error for a file of `size` bytes over `max_bytes` (for readers that read
// through their own descriptor).
void check_size_limit(const std::string& path, uint64_t size, uint64_t max_bytes, std::string_view what);
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                               std::string_view what = "this file");

}  // namespace ember::io
