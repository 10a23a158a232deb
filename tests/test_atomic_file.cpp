// What ember's writers do with what is at an output path (Note [What an output path may be] and
// Note [Temporary files] in io/atomic_file.h): a replaced file keeps its mode, streams are
// written in place, links to files and other things are refused and left as they were, and only
// ember's own stale temporary files are ever removed. The checksums that must not forget data
// before a zero-element tensor are here too.

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <ember/ember.h>
#include <ember/io/atomic_file.h>
#include <ember/io/safetensors.h>
#include <ember/io/training_state.h>
#include <ember/train/config.h>
#include <ember/train/data_setup.h>
#include <ember/train/weights.h>
#include <ember/train/checkpoint.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"

using namespace ember;
using Catch::Contains;
using testing::read_text;
using testing::TempDir;
using testing::write_text;
namespace fs = std::filesystem;

namespace {

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("atomic write: a replaced file keeps its permission bits", "[io][output]") {
  TempDir tmp("ember_output_mode");
  const fs::path p = tmp.path / "weights.safetensors";
  write_text(p, "old");
  REQUIRE(::chmod(p.c_str(), 0640) == 0);
  const ino_t before = lstat_of(p).st_ino;
  io::write_file_atomic(p.string(), std::string_view("new"));
  CHECK(read_text(p) == "new");
  CHECK((lstat_of(p).st_mode & 07777) == 0640);
  CHECK(lstat_of(p).st_ino != before);  // replaced by rename, not rewritten
  REQUIRE(::chmod(p.c_str(), 0600) == 0);
  io::write_file_atomic(p.string(), std::string_view("newer"));
  CHECK((lstat_of(p).st_mode & 07777) == 0600);
}

TEST_CASE("atomic write: a symlink to a file is refused, and the link and the file stay as they were",
          "[io][output]") {
  TempDir tmp("ember_output_link");
  const fs::path victim = tmp.path / "victim.txt", link = tmp.path / "out.onnx";
  write_text(victim, "the user's file");
  fs::create_symlink(victim, link);
  CHECK_THROWS_WITH(io::write_file_atomic(link.string(), std::string_view("ember's bytes")),
                    link.string() + ": is a symbolic link to '" + victim.string() +
                        "'; ember writes through a link only to a character device or a FIFO, never to a file: name "
                        "the file itself");
  CHECK(fs::is_symlink(link));
  CHECK(read_text(victim) == "the user's file");
  CHECK(names_in(tmp.path) == std::vector<std::string>{"out.onnx", "victim.txt"});
  // A dangling link is refused the same way (a rename would have replaced it).
  fs::create_symlink(tmp.path / "nowhere", tmp.path / "dangling");
  CHECK_THROWS_WITH(io::write_file_atomic((tmp.path / "dangling").string(), std::string_view("x")),
                    Contains("is a symbolic link to"));
  CHECK(fs::is_symlink(tmp.path / "dangling"));
}

TEST_CASE("atomic write: a link to a character device is written in place and stays a link", "[io][output]") {
  TempDir tmp("ember_output_devlink");
  const fs::path link = tmp.path / "null.onnx";
  fs::create_symlink("/dev/null", link);
  const struct stat null_before = lstat_of("/dev/null");
  io::write_file_atomic(link.string(), std::string_view("bytes into the void"));
  CHECK(fs::is_symlink(link));
  const struct stat null_after = lstat_of("/dev/null");
  CHECK(S_ISCHR(null_after.st_mode));
  CHECK(null_after.st_ino == null_before.st_ino);
  CHECK(names_in(tmp.path) == std::vector<std::string>{"null.onnx"});  // no temporary file
}

TEST_CASE("atomic write: a device node made here is written in place, never replaced", "[io][output]") {
  // mknod needs root (CAP_MKNOD), as the CI containers run; without it this test fails, saying so.
  TempDir tmp("ember_output_dev");
  const fs::path dev = tmp.path / "null";
  const int rc = ::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3));
  INFO("mknod needs root (CAP_MKNOD): " << std::strerror(errno));
  REQUIRE(rc == 0);
  const struct stat before = lstat_of(dev);
  io::write_file_atomic(dev.string(), std::string_view("into /dev/null's twin"));
  const struct stat after = lstat_of(dev);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_ino == before.st_ino);
  CHECK(after.st_rdev == makedev(1, 3));
  const fs::path blk = tmp.path / "disk";
  REQUIRE(::mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0);  // a loop device number
  CHECK_THROWS_WITH(io::write_file_atomic(blk.string(), std::string_view("x")),
                    blk.string() + ": is a block device; ember writes only regular files, character devices and FIFOs");
  CHECK(S_ISBLK(lstat_of(blk).st_mode));
}

TEST_CASE("atomic write: a FIFO is written to while it has a reader, and refused without one", "[io][output]") {
  TempDir tmp("ember_output_fifo");
  const fs::path fifo = tmp.path / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const ino_t ino = lstat_of(fifo).st_ino;
  // No reader: an error at once, not a wait.
  CHECK_THROWS_WITH(io::write_file_atomic(fifo.string(), std::string_view("x")),
                    fifo.string() + ": is a FIFO that no process reads; ember writes to a FIFO only while it has a "
                                    "reader");
  CHECK(S_ISFIFO(lstat_of(fifo).st_mode));
  // A reader: the bytes arrive, and the FIFO stays.
  const int rfd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(rfd >= 0);
  std::string got;
  std::thread reader([&] {
    ::fcntl(rfd, F_SETFL, ::fcntl(rfd, F_GETFL) & ~O_NONBLOCK);
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(rfd, buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      else if (n == 0 && !got.empty()) break;
      else if (n < 0 && errno != EINTR) break;
      else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const std::string payload(100000, 'e');  // more than a pipe's buffer
  io::write_file_atomic(fifo.string(), std::string_view(payload));
  reader.join();
  ::close(rfd);
  CHECK(got == payload);
  CHECK(S_ISFIFO(lstat_of(fifo).st_mode));
  CHECK(lstat_of(fifo).st_ino == ino);
}

TEST_CASE("atomic write: a socket and a directory are refused and stay", "[io][output]") {
  TempDir tmp("ember_output_sock");
  const fs::path sock = tmp.path / "s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK_THROWS_WITH(io::write_file_atomic(sock.string(), std::string_view("x")),
                    sock.string() + ": is a socket; ember writes only regular files, character devices and FIFOs");
  CHECK(S_ISSOCK(lstat_of(sock).st_mode));
  ::close(fd);
  fs::create_directory(tmp.path / "d");
  CHECK_THROWS_WITH(io::write_file_atomic((tmp.path / "d").string(), std::string_view("x")),
                    (tmp.path / "d").string() + ": is a directory, not a file");
  CHECK(names_in(tmp.path) == std::vector<std::string>{"d", "s"});
}

TEST_CASE("temporary files: only ember's exact names of ended writers are removed", "[io][output]") {
  TempDir tmp("ember_output_temps");
  const fs::path d = tmp.path;
  // A process id that is not running: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  const std::vector<std::string> stale = {".model.safetensors.tmp-" + dead + "-0-123",
                                          ".checkpoint.json.tmp-" + dead + "-7-99"};
  const std::vector<std::string> kept = {
      ".model.safetensors.tmp-" + live + "-0-5",  // a live writer's
      ".notes.tmp-backup",                        // the user's: not the exact form
      ".x.tmp-" + dead + "-1",                    // two numbers, not three
      "model.safetensors.tmp-" + dead + "-0-1",   // no leading dot
      ".a.tmp-" + dead + "-0-1x",                 // not digits
  };
  for (const auto& n : stale) write_text(d / n, "partial");
  for (const auto& n : kept) write_text(d / n, "keep");
  fs::create_directory(d / (".dir.tmp-" + dead + "-0-1"));  // not a regular file
  fs::create_symlink(d / "nowhere", d / (".link.tmp-" + dead + "-0-1"));
  io::remove_stale_temp_files(d.string());
  std::vector<std::string> want = kept;
  want.push_back(".dir.tmp-" + dead + "-0-1");
  want.push_back(".link.tmp-" + dead + "-0-1");
  std::sort(want.begin(), want.end());
  CHECK(names_in(d) == want);
  for (const auto& n : kept) CHECK(read_text(d / n) == "keep");
}

TEST_CASE("temporary files: a write of the same target removes what a killed writer left", "[io][output]") {
  TempDir tmp("ember_output_next");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string left = ".model.onnx.tmp-" + std::to_string(child) + "-0-42";
  const std::string other = ".report.html.tmp-" + std::to_string(child) + "-0-42";  // another target's
  write_text(tmp.path / left, "half a model");
  write_text(tmp.path / other, "half a report");
  io::write_file_atomic((tmp.path / "model.onnx").string(), std::string_view("model"));
  CHECK(names_in(tmp.path) == std::vector<std::string>{other, "model.onnx"});
}

TEST_CASE("temporary files: a signal during a write removes the temporary file", "[io][output]") {
  TempDir tmp("ember_output_signal");
  const fs::path target = tmp.path / "model.onnx";
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGTERM, SIG_DFL);  // Catch2's own handler, inherited, would keep ours out
    io::remove_temp_files_on_signals();
    io::write_file_atomic(target.string(), [&](io::FileWriter& w) {
      w.write(std::string_view("half of it"));
      ::write(ready[1], "r", 1);
      for (;;) ::pause();  // the signal arrives here
    });
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  bool temp_seen = false;
  for (const auto& n : names_in(tmp.path)) temp_seen |= io::parse_temp_name(n);
  CHECK(temp_seen);
  REQUIRE(::kill(child, SIGTERM) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);  // ended by the signal, as without the handler
  CHECK(names_in(tmp.path).empty());
  ::close(ready[0]);
  ::close(ready[1]);
}

// ---- checksums and zero-element tensors ---------------------------------------------------------

namespace {
// A module whose state_dict has a zero-element tensor after a normal one (by name order).
struct WithEmpty : nn::Module {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {4});
  Tensor z = zeros({0, 3});
  WithEmpty() {
    register_parameter("a", a);
    register_parameter("z", z);
  }
  Tensor forward(const Tensor& x) override { return x; }
};
}  // namespace

TEST_CASE("checksums: a zero-element tensor does not hide a change to the tensors before it", "[io][output]") {
  TempDir tmp("ember_output_crc");
  const std::string path = (tmp.path / "w.safetensors").string();
  WithEmpty m;
  train::TrainConfig cfg;
  cfg.model = "none";
  train::save_weights(path, m, cfg, train::DataInfo{});
  io::SafetensorsFile f = io::load_safetensors(path);
  train::verify_weights_checksum(f);  // as written: fine
  for (auto& [name, t] : f.tensors)
    if (name == "a") t = from_vector<float>({1, 2, 3, 5}, {4});
  CHECK_THROWS_WITH(train::verify_weights_checksum(f), Contains("the tensors do not match the file's checksum"));

  // The training state's checksum: an optimizer tensor changed before a zero-element one.
  io::TrainingState st;
  st.optimizer.name = "sgd";
  st.optimizer.tensors = {{"a", from_vector<float>({1, 2, 3, 4}, {4})}, {"z", zeros({0})}};
  const std::string state = (tmp.path / "state.safetensors").string();
  io::save_training_state(state, st);
  std::string bytes = read_text(state);
  const std::string four = std::string("\x00\x00\x80\x40", 4);  // 4.0f, the last element of "a"
  const size_t at = bytes.rfind(four);
  REQUIRE(at != std::string::npos);
  bytes[at + 3] = 0x41;  // 16.0f
  write_text(state, bytes);
  CHECK_THROWS_WITH(io::load_training_state(state), Contains("checksum mismatch"));
}
