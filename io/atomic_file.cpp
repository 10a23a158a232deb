#include "atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <new>
#include <random>
#include <thread>

#include "../core/error.h"
#include "fault.h"

namespace ember::io {

namespace {

// Small writes (a JSON header, many tiny tensors) are gathered up to this size; bigger ones
// bypass the buffer so a 100 MB tensor is not copied twice.
constexpr size_t kWriteBufferBytes = 1 << 16;

std::string errno_text(int err) { return std::strerror(err); }

// Writes all n bytes, retrying partial writes and EINTR. Returns 0 or an errno value.
int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

bool is_stream(mode_t mode) { return S_ISCHR(mode) || S_ISFIFO(mode); }

}  // namespace

std::string file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int open_output_stream(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENXIO) EMBER_THROW(path, ": is a FIFO that no process reads; ember writes to a FIFO only while it has a reader");
    EMBER_THROW(path, ": cannot open for writing: ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !is_stream(st.st_mode)) {
    ::close(fd);
    EMBER_THROW(path, ": changed while it was being opened (it is no longer a character device or a FIFO); nothing "
                "was written");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    EMBER_THROW(path, ": cannot set up writing: ", errno_text(err));
  }
  return fd;
}

// ---- FileWriter -------------------------------------------------------------------------------

void FileWriter::write_raw(const void* data, size_t n) {
  const char* what = in_place_ ? ": cannot write: " : ": cannot write temporary file: ";
  if (inject_enospc_) EMBER_THROW(path_, what, errno_text(ENOSPC));
  if (const int err = write_all(fd_, static_cast<const char*>(data), n); err != 0) EMBER_THROW(path_, what, errno_text(err));
}

void FileWriter::flush() {
  if (buffer_.empty()) return;
  write_raw(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void FileWriter::write(const void* data, size_t n) {
  if (n == 0) return;
  if (buffer_.size() + n <= kWriteBufferBytes) {
    if (buffer_.capacity() < kWriteBufferBytes) buffer_.reserve(kWriteBufferBytes);
    const char* p = static_cast<const char*>(data);
    buffer_.insert(buffer_.end(), p, p + n);
  } else {
    flush();
    write_raw(data, n);
  }
  written_ += n;
}

// ---- write_file_atomic ------------------------------------------------------------------------

OutputTarget inspect_output(const std::string& path) {
  EMBER_CHECK(!path.empty(), "empty output path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return {};
    EMBER_THROW(path, ": cannot look at it before writing: ", errno_text(err));
  }
  if (S_ISREG(st.st_mode)) return {OutputKind::regular, st.st_mode, st.st_uid, st.st_gid};
  if (is_stream(st.st_mode)) return {OutputKind::stream};
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::string to = std::filesystem::read_symlink(path, ec).string();
    struct stat target {};
    if (::stat(path.c_str(), &target) == 0 && is_stream(target.st_mode)) return {OutputKind::stream};
    EMBER_THROW(path, ": is a symbolic link to '", to, "'; ember writes through a link only to a character device or a "
                "FIFO, never to a file: name the file itself");
  }
  if (S_ISDIR(st.st_mode)) EMBER_THROW(path, ": is a directory, not a file");
  EMBER_THROW(path, ": is ", file_kind(st.st_mode), "; ember writes only regular files, character devices and FIFOs");
}

void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& writer) {
  const OutputTarget target = inspect_output(path);
  if (target.kind == OutputKind::stream) {
    // In place: the device or FIFO gets the bytes; there is nothing to replace atomically.
    const int fd = open_output_stream(path);
    try {
      FileWriter w(fd, path, true);
      w.inject_enospc_ = fault_enospc("file");
      writer(w);
      w.flush();
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) EMBER_THROW(path, ": cannot close after writing: ", errno_text(errno));
    return;
  }
  const std::filesystem::path p(path);
  remove_stale_temp_files(p.has_parent_path() ? p.parent_path().string() : ".", {p.filename().string()});
  TempFile tmp(path);  // unlinked by its destructor on every exit but the commit
  FileWriter w(tmp.fd(), path, false);
  w.inject_enospc_ = fault_enospc("file");
  writer(w);
  w.flush();
  if (target.kind == OutputKind::regular) {
    // The replacement keeps what the user set on the file: its owner and group where this process
    // may give them (root, or a group it is in; otherwise it stays this user's, as any file it
    // writes), then its permission bits.
    if ((target.uid != ::geteuid() || target.gid != ::getegid()) && ::fchown(tmp.fd(), target.uid, target.gid) != 0) {
      // Not permitted: see above.
    }
    if (::fchmod(tmp.fd(), target.mode & 07777) != 0)
      EMBER_THROW(path, ": cannot give the new file the mode of the old one: ", errno_text(errno));
  }
  if (::fsync(tmp.fd()) != 0) EMBER_THROW(path, ": cannot sync temporary file to disk: ", errno_text(errno));
  if (const int64_t ms = fault_value("slow-rename-ms"); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  fault_point("atomic:before-rename");
  tmp.commit();
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(bytes.data(), bytes.size()); });
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(bytes); });
}

// ---- reading ----------------------------------------------------------------------------------

namespace {

void check_regular(const std::string& path, mode_t mode) {
  if (S_ISREG(mode)) return;
  if (S_ISDIR(mode)) EMBER_THROW(path, ": is a directory, not a file");
  EMBER_THROW(path, ": is ", file_kind(mode), ", not a regular file; ember reads regular files only");
}

}  // namespace

void check_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) EMBER_THROW(path, ": no such file");
    EMBER_THROW(path, ": cannot open for reading: ", errno_text(err));
  }
  check_regular(path, st.st_mode);
}

FileReader::FileReader(const std::string& path) : path_(path) {
  // Note [Reading untrusted files]: stat before open, so that a FIFO (whose open blocks until a
  // writer comes) or a device is refused without being opened.
  check_regular_file(path);
  struct stat st {};
  // O_NONBLOCK: should the path have become a FIFO since the stat, open returns at once (and
  // the fstat below refuses it); reads of a regular file ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT) EMBER_THROW(path, ": no such file");
    EMBER_THROW(path, ": cannot open for reading: ", errno_text(err));
  }
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    EMBER_THROW(path, ": cannot stat: ", errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    check_regular(path, st.st_mode);
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read_at(uint64_t offset, void* dst, size_t n, std::string_view what) const {
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      EMBER_THROW(path_, ": cannot read ", what, ": ", errno_text(errno));
    }
    if (r == 0)
      EMBER_THROW(path_, ": unexpected end of file reading ", what, " (wanted ", n, " bytes at offset ", offset,
                  ", got ", done, ")");
    done += static_cast<size_t>(r);
  }
}

void check_size_limit(const std::string& path, uint64_t size, uint64_t max_bytes, std::string_view what) {
  if (size > max_bytes)
    EMBER_THROW(path, ": ", size, " bytes is more than the ", max_bytes, "-byte limit for ", what,
                " (docs/data.md, \"Limits\"): the file is not what its name says, or damaged");
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  FileReader f(path);
  check_size_limit(path, f.size(), max_bytes, what);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(f.size()));
  } catch (const std::bad_alloc&) {
    EMBER_THROW(path, ": cannot allocate ", f.size(), " bytes to read it: out of memory");
  }
  f.read_at(0, bytes.data(), bytes.size(), "the file");
  return bytes;
}

}  // namespace ember::io
