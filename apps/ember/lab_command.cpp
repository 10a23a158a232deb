// `ember lab`: finds the kernel labs' programs and runs them (apps/ember/lab_command.h).

#include "lab_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <ember/core/error.h>
#include <filesystem>
#include <vector>

extern char** environ;

namespace ember::app {
namespace {

namespace fs = std::filesystem;
constexpr const char* kPrefix = "lab_";

fs::path labs_dir() {
  if (const char* env = std::getenv("EMBER_LABS_DIR"); env && *env) {
    EMBER_CHECK(fs::is_directory(env), "EMBER_LABS_DIR=", env, " is not a directory");
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path dir = ec ? fs::path("labs") : self.parent_path().parent_path() / "labs";
  EMBER_CHECK(fs::is_directory(dir), "the kernel labs are not built (looked in ", dir.string(),
              "); build them with `cmake --build build --target labs`, or set EMBER_LABS_DIR");
  return dir;
}

// The names of the labs whose programs are in `dir`, sorted.
std::vector<std::string> lab_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (e.is_regular_file() && file.rfind(kPrefix, 0) == 0 && ::access(e.path().c_str(), X_OK) == 0)
      names.push_back(file.substr(std::string(kPrefix).size()));
  }
  std::sort(names.begin(), names.end());
  EMBER_CHECK(!names.empty(), "no lab programs (lab_<name>) in ", dir.string(),
              "; build them with `cmake --build build --target labs`");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Runs `argv` with the same standard output and error; returns its exit status.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  EMBER_CHECK(err == 0, "could not start ", args[0], ": ", std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    EMBER_CHECK(errno == EINTR, "waiting for ", args[0], ": ", std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  EMBER_THROW(args[0], " was killed by signal ", WTERMSIG(status));
}

}  // namespace

void run_lab_list() {
  const fs::path dir = labs_dir();
  std::printf("kernel labs in %s (docs/labs.md; run one: ember lab run NAME)\n", dir.c_str());
  for (const std::string& name : lab_names(dir)) {
    const std::string command = "'" + (dir / (kPrefix + name)).string() + "' --list";
    FILE* p = ::popen(command.c_str(), "r");
    EMBER_CHECK(p != nullptr, "could not run ", command);
    std::printf("%s\n", name.c_str());
    std::array<char, 512> line{};
    while (std::fgets(line.data(), line.size(), p)) {
      // "ID\tNAME\tIDEA": shown as an indented row
      std::string l = line.data();
      if (!l.empty() && l.back() == '\n') l.pop_back();
      const size_t a = l.find('\t'), b = a == std::string::npos ? a : l.find('\t', a + 1);
      if (b == std::string::npos) continue;
      std::printf("  v%-3s %-24s %s\n", l.substr(0, a).c_str(), l.substr(a + 1, b - a - 1).c_str(), l.substr(b + 1).c_str());
    }
    const int status = ::pclose(p);
    EMBER_CHECK(status == 0, "lab_", name, " --list failed (exit status ", status, ")");
  }
}

int run_lab(const LabOptions& o) {
  const fs::path dir = labs_dir();
  const std::vector<std::string> names = lab_names(dir);
  if (std::find(names.begin(), names.end(), o.lab) == names.end())
    EMBER_THROW("no lab named '", o.lab, "'; the labs are ", joined(names), " (ember lab list)");
  std::vector<std::string> args = {(dir / (kPrefix + o.lab)).string()};
  if (o.version >= 0) args.insert(args.end(), {"--version", std::to_string(o.version)});
  if (!o.size.empty()) args.insert(args.end(), {"--size", o.size});
  if (o.broken) args.push_back("--broken");
  if (o.json) args.push_back("--json");
  return run_program(args);
}

}  // namespace ember::app
