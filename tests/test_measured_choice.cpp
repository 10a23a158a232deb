// Kernel paths chosen by measurement (kernels/cpu/measured_choice.h, Note [Kernels chosen by
// measurement]): the fastest candidate (by CPU time) is chosen and its result left, the choice is
// cached per process, kept in the choices file for the next process and taken from it, a file
// ember did not write is neither read nor changed, and a failing candidate is not cached.

#include <catch2/catch.hpp>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ember/kernels/cpu/measured_choice.h>

#include "test_util.h"

namespace kc = ember::kernels::cpu;
namespace fs = std::filesystem;

namespace {

// Burns about `ms` milliseconds of this thread's CPU time.
void spin(double ms) {
  timespec t0{}, t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  volatile double sink = 0;
  do {
    for (int i = 0; i < 1000; ++i) sink = sink + 1.0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) * 1e-6 < ms);
}

// Restores the process's choices file and forgets the test's choices.
struct FileGuard {
  std::string saved = kc::measured_choice_file();
  ~FileGuard() {
    kc::forget_measured_choices();
    kc::set_measured_choice_file(saved);
  }
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ember-choices-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("measured choice: the fastest candidate by CPU time, its result, cached", "[measured]") {
  FileGuard guard;
  kc::set_measured_choice_file("");
  kc::forget_measured_choices();
  std::vector<int> runs(3, 0);
  int result = -1;
  auto run = [&](int i) {
    ++runs[i];
    spin(i == 1 ? 0.3 : 3.0);  // candidate 1 is ten times faster
    result = 100 + i;
  };
  int restores = 0;
  const int chosen = kc::run_measured("test", "shape A", {"slow", "fast", "slower"}, run, [&] { ++restores; });
  CHECK(chosen == 1);
  CHECK(result == 101);  // the chosen candidate's output, though "slower" ran last
  for (int n : runs) CHECK(n >= kc::kMeasureRounds);
  CHECK(restores == 3 * kc::kMeasureRounds + 1);  // before every timed run, and before the final one
  const std::vector<kc::MeasuredChoice> made = kc::measured_choices();
  REQUIRE(made.size() == 1);
  CHECK(made[0].family == "test");
  CHECK(made[0].shape == "shape A");
  CHECK(made[0].chosen == 1);
  CHECK_FALSE(made[0].from_file);
  CHECK(made[0].seconds[1] < made[0].seconds[0]);
  // Cached: one run of the chosen candidate, nothing measured.
  const std::vector<int> before = runs;
  CHECK(kc::run_measured("test", "shape A", {"slow", "fast", "slower"}, run) == 1);
  CHECK(runs[1] == before[1] + 1);
  CHECK(runs[0] == before[0]);
  CHECK(runs[2] == before[2]);
  // Another candidate set is another choice.
  CHECK(kc::run_measured("test", "shape A", {"slow", "fast"}, run) == 1);
  CHECK(kc::measured_choices().size() == 2);
}

TEST_CASE("measured choice: kept in the choices file and taken from it by the next process", "[measured]") {
  FileGuard guard;
  const fs::path dir = temp_dir("keep");
  const fs::path file = dir / "sub" / "kernel-choices.tsv";
  kc::set_measured_choice_file(file.string());
  kc::forget_measured_choices();
  std::vector<int> runs(2, 0);
  auto fast_second = [&](int i) {
    ++runs[i];
    spin(i == 1 ? 0.3 : 3.0);
  };
  CHECK(kc::run_measured("test", "shape B", {"a", "b"}, fast_second) == 1);
  const std::string text = read_all(file);  // the directories made, a header and one line
  CHECK(text.rfind("# ember kernel choices", 0) == 0);
  CHECK(text.find("\ttest\tshape B\ta, b\tb\t") != std::string::npos);
  // A new process (choices forgotten) where "a" would now win takes the file's "b", measuring nothing.
  kc::forget_measured_choices();
  runs = {0, 0};
  auto fast_first = [&](int i) {
    ++runs[i];
    spin(i == 0 ? 0.3 : 3.0);
  };
  CHECK(kc::run_measured("test", "shape B", {"a", "b"}, fast_first) == 1);
  CHECK(runs == std::vector<int>{0, 1});
  const std::vector<kc::MeasuredChoice> made = kc::measured_choices();
  REQUIRE(made.size() == 1);
  CHECK(made[0].from_file);
  CHECK(read_all(file) == text);  // nothing appended for a choice read from the file
  fs::remove_all(dir);
}

TEST_CASE("measured choice: a file ember did not write is neither read nor changed", "[measured]") {
  FileGuard guard;
  const fs::path dir = temp_dir("foreign");
  fs::create_directories(dir);
  const fs::path file = dir / "notes.tsv";
  const std::string foreign = "my own notes\nember 0.1.0\ttest\tshape C\ta, b\ta\t0,0\n";
  {
    std::ofstream out(file);
    out << foreign;
  }
  kc::set_measured_choice_file(file.string());
  kc::forget_measured_choices();
  auto fast_second = [&](int i) { spin(i == 1 ? 0.3 : 3.0); };
  CHECK(kc::run_measured("test", "shape C", {"a", "b"}, fast_second) == 1);  // measured, not read
  CHECK(read_all(file) == foreign);
  fs::remove_all(dir);
}

TEST_CASE("measured choice: a candidate that throws leaves the shape unmeasured", "[measured]") {
  FileGuard guard;
  kc::set_measured_choice_file("");
  kc::forget_measured_choices();
  bool fail = true;
  auto run = [&](int i) {
    if (fail && i == 1) throw std::runtime_error("candidate 1 failed");
    spin(i == 1 ? 0.3 : 3.0);
  };
  CHECK_THROWS_WITH(kc::run_measured("test", "shape D", {"a", "b"}, run), "candidate 1 failed");
  CHECK(kc::measured_choices().empty());
  fail = false;
  CHECK(kc::run_measured("test", "shape D", {"a", "b"}, run) == 1);
  CHECK(kc::measured_choices().size() == 1);
}
