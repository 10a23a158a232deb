#include "atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>

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

// The directory holding `path` ("." for a bare file name), and the file name itself.
std::filesystem::path parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// A name that no other writer (thread or process) picks: pid + per-process counter + random
// bits. O_EXCL still guards against a collision with a stray file; we retry on EEXIST.
std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  const std::string base = std::filesystem::path(path).filename().string();
  const uint64_t n = counter.fetch_add(1);
  return (parent_dir(path) / ("." + base + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n) + "-" +
                              std::to_string((salt + n * 0x9e3779b97f4a7c15ULL) % 1000000007ULL)))
      .string();
}

// fsync on the directory makes the rename durable. Some filesystems cannot fsync a directory
// (EINVAL); the rename has happened and is as durable as that filesystem allows, so that is
// not an error.
void fsync_directory(const std::string& path) {
  const std::string dir = parent_dir(path).string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) EMBER_THROW(path, ": cannot open directory '", dir, "' to sync the rename: ", errno_text(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    EMBER_THROW(path, ": cannot sync directory '", dir, "' after the rename: ", errno_text(err));
}

}  // namespace

// ---- FileWriter -------------------------------------------------------------------------------

void FileWriter::write_raw(const void* data, size_t n) {
  if (inject_enospc_) EMBER_THROW(path_, ": cannot write temporary file: ", errno_text(ENOSPC));
  if (const int err = write_all(fd_, static_cast<const char*>(data), n); err != 0)
    EMBER_THROW(path_, ": cannot write temporary file: ", errno_text(err));
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

void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& writer) {
  EMBER_CHECK(!path.empty(), "write_file_atomic: empty path");
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = temp_name_for(path);
    // 0666 so the umask decides the final mode, as for any newly created file.
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST)
      EMBER_THROW(path, ": cannot create temporary file in '", parent_dir(path).string(), "': ", errno_text(errno));
  }
  if (fd < 0) EMBER_THROW(path, ": cannot create a unique temporary file: ", errno_text(EEXIST));

  // From here on, every exit path either renames tmp over path or unlinks it.
  try {
    FileWriter w(fd, path);
    w.inject_enospc_ = fault_enospc("file");
    writer(w);
    w.flush();
    if (::fsync(fd) != 0) EMBER_THROW(path, ": cannot sync temporary file to disk: ", errno_text(errno));
    // close() can report a deferred write error (NFS, quota): it must succeed before the rename.
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) EMBER_THROW(path, ": cannot close temporary file: ", errno_text(errno));
    fault_point("atomic:before-rename");
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      EMBER_THROW(path, ": cannot rename temporary file over it: ", errno_text(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());  // best effort: the original error is the one worth reporting
    throw;
  }
  fsync_directory(path);
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(bytes.data(), bytes.size()); });
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(bytes); });
}

int remove_stale_temp_files(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos && e.is_regular_file(ec)) {
      std::error_code rm;
      if (std::filesystem::remove(e.path(), rm)) ++removed;
    }
  }
  return removed;
}

// ---- reading ----------------------------------------------------------------------------------

namespace {

// What a file that is not a regular one is, for messages.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

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

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  FileReader f(path);
  if (f.size() > max_bytes)
    EMBER_THROW(path, ": ", f.size(), " bytes is more than the ", max_bytes, "-byte limit for ", what,
                " (docs/data.md, \"Limits\"): the file is not what its name says, or damaged");
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
