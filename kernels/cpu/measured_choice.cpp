// Kernel paths chosen by measurement (measured_choice.h).
//
// Note [Kernels chosen by measurement]
// Which CPU kernel is fastest for a shape depends on the processor more than any threshold can
// say: on AMD's Zen 4, VDPBF16PS runs at twice float32's FMA rate and the bf16 GEMM beats sgemm
// almost everywhere; on Intel's Sapphire Rapids class (this project's Xeon family 6 model 207) it
// runs at the FMA's rate — no gain — while AMX tiles run at eight times it, but pay for packing
// and tile loads on small or thin products. Fixed thresholds tuned on one of them lose on the
// other (issue 37: `--amp bf16` slower than float32 on the Xeon). So, like cuDNN's benchmark
// mode, a path is chosen by timing the candidates the first time a shape is seen, and the choice
// is cached for the rest of the process:
//   - what is measured: the operation itself, on its real operands (each run computes the whole
//     result, and restore() puts back what a run reads and overwrites), kMeasureRounds times per
//     candidate, in turn, the best time of each kept: the first round pays for cold caches and
//     first allocations, the later ones are the steady state. The time is the calling thread's
//     CPU time, not the wall clock's: on a shared machine (the development VMs run other
//     engineers' builds) a wall-clock race is won by whichever candidate the scheduler left alone;
//   - the key: the family and the shape as the caller names it, with everything that changes
//     which path wins — dimensions, transposes, the thread count the operation runs on;
//   - numerics: every candidate accumulates in float32 and rounds once (Note [bf16 GEMM on the
//     CPU]); the paths differ only in the order of the f32 sums, bounded by the tests. Within a
//     process a shape always takes the same path, and the first call's result is the chosen
//     path's (it runs again if it did not run last), so a run is reproducible given its choices.
//   - across processes: a close race could go either way in two runs, and a resumed run (or two
//     runs compared bit for bit) would then differ in the last bits. So the choices are kept per
//     machine in a file, one line per choice (measured_choice_file(): EMBER_KERNEL_CHOICES, else
//     ~/.cache/ember/kernel-choices.tsv), read before measuring a shape and appended to after: the
//     first process on a machine measures, every later one takes its choices. A line names the CPU
//     and ember's version, so another processor or build measures afresh; deleting the file
//     measures again; EMBER_KERNEL_CHOICES=off keeps choices per process. Environment variables
//     force one path for tests and benchmarks (EMBER_CPU_BF16, EMBER_CPU_CONV).
// The cost is paid once per shape: a training run meets a few dozen shapes (its layers' passes,
// the last partial batch, the evaluation batch), and each is measured in its first step.
// `ember train --profile` names each shape's path in its table ("gemm_bf16 NN 64x2156x288, 1
// thread: amx"), and measured_choices() lists the times behind each choice.

#include "measured_choice.h"

#include <algorithm>
#include <ctime>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "../../core/build_info.h"
#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "../../core/profiler.h"

namespace ember::kernels::cpu {

namespace {

struct Entry {
  bool done = false;
  size_t order = 0;  // position in measured_choices()
  MeasuredChoice choice;
};

struct Table {
  std::mutex mu;
  std::condition_variable ready;
  std::map<std::string, std::shared_ptr<Entry>> entries;
  size_t made = 0;
  bool file_set = false;  // file chosen (by the environment on first use, or set_measured_choice_file)
  std::string file;       // "" for none
};

// ---- the choices file ---------------------------------------------------------------------------

constexpr const char* kFileHeader =
    "# ember kernel choices: one line per measured shape, the first line of a shape wins; delete this file to "
    "measure again (Note [Kernels chosen by measurement] in kernels/cpu/measured_choice.cpp)";

std::string default_file() {
  const char* env = std::getenv("EMBER_KERNEL_CHOICES");
  if (env) return std::string(env) == "off" ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/ember/kernel-choices.tsv";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/ember/kernel-choices.tsv";
  return "";
}

// What a line's first field must be for this process to take it: ember's version and the CPU.
std::string machine_field() {
  const CpuFeatures& f = cpu_features();
  return "ember " + build_info().version + " " + build_info().build_type + " | " + f.model_name + " | family " +
         std::to_string(f.family) + " model " + std::to_string(f.model) + " stepping " + std::to_string(f.stepping);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// The chosen candidate for (family, shape, candidates) in the file, or -1. A line is
// machine TAB family TAB shape TAB candidates (", ") TAB chosen TAB seconds (","); a file ember
// did not write (no header) is not read.
int read_choice(const std::string& file, const MeasuredChoice& want) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line != kFileHeader) return -1;
  const std::string prefix = machine_field() + "\t" + want.family + "\t" + want.shape + "\t" +
                             join(want.candidates, ", ") + "\t";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = line.substr(prefix.size()), chosen = rest.substr(0, rest.find('\t'));
    for (size_t i = 0; i < want.candidates.size(); ++i)
      if (want.candidates[i] == chosen) return static_cast<int>(i);
  }
  return -1;
}

// Appends a choice with one write (O_APPEND: whole lines from processes writing at once), creating
// the file with its header. A file without ember's header is left alone; failures are ignored
// (the choice still holds for this process).
void append_choice(const std::string& file, const MeasuredChoice& c) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string header;
  {
    std::ifstream in(file);
    std::getline(in, header);
  }
  std::string out;
  if (header.empty()) out = std::string(kFileHeader) + "\n";
  else if (header != kFileHeader) return (void)::close(fd);
  std::ostringstream seconds;
  for (size_t i = 0; i < c.seconds.size(); ++i) seconds << (i ? "," : "") << c.seconds[i];
  out += machine_field() + "\t" + c.family + "\t" + c.shape + "\t" + join(c.candidates, ", ") + "\t" +
         c.candidates[c.chosen] + "\t" + seconds.str() + "\n";
  [[maybe_unused]] const ssize_t written = ::write(fd, out.data(), out.size());
  ::close(fd);
}

const std::string& choice_file(Table& t) {  // under t.mu
  if (!t.file_set) {
    t.file = default_file();
    t.file_set = true;
  }
  return t.file;
}

Table& table() {
  static Table t;
  return t;
}

// The calling thread's CPU time in seconds: unlike the wall clock, it does not count the time the
// thread waits for a core, so a choice made on a loaded machine is the one an idle machine would
// make. (A threaded candidate's calling thread does its share of the work and then waits for the
// others at the barrier — spinning, which counts — so threading still shows as less time.)
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double time_once(const std::function<void(int)>& run, int i) {
  const double t0 = thread_seconds();
  run(i);
  return thread_seconds() - t0;
}

void run_named(const MeasuredChoice& c, const std::function<void(int)>& run) {
  if (!profiler::enabled()) return run(c.chosen);
  const profiler::Scope scope(c.family + " " + c.shape + ": " + c.candidates[c.chosen]);
  run(c.chosen);
}

// Times every candidate kMeasureRounds times, chooses the fastest, and leaves the chosen path's
// outputs (running it once more unless it ran last).
void measure_entry(Entry& e, const std::function<void(int)>& run, const std::function<void()>& restore) {
  MeasuredChoice& c = e.choice;
  const int n = static_cast<int>(c.candidates.size());
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  int last = -1;
  {
    const profiler::Scope scope(profiler::enabled() ? c.family + " " + c.shape + ": measuring" : std::string());
    for (int round = 0; round < kMeasureRounds && n > 1; ++round)
      for (int i = 0; i < n; ++i) {
        if (restore) restore();
        best[i] = std::min(best[i], time_once(run, i));
        last = i;
      }
  }
  c.seconds = best;
  c.chosen = static_cast<int>(std::min_element(best.begin(), best.end()) - best.begin());
  if (c.chosen != last) {
    if (restore && last >= 0) restore();
    run_named(c, run);
  }
}

}  // namespace

int run_measured(const std::string& family, const std::string& shape, const std::vector<std::string>& candidates,
                 const std::function<void(int)>& run, const std::function<void()>& restore) {
  EMBER_CHECK(!candidates.empty(), "run_measured: no candidates for ", family, " ", shape);
  Table& t = table();
  std::string key = family + "\n" + shape;  // and the candidates: another set is another choice
  for (const std::string& c : candidates) key += "\n" + c;
  std::shared_ptr<Entry> entry;
  bool measure = false;
  {
    std::unique_lock<std::mutex> lock(t.mu);
    auto it = t.entries.find(key);
    if (it == t.entries.end()) {
      entry = std::make_shared<Entry>();
      entry->choice = {family, shape, candidates, std::vector<double>(candidates.size(), 0.0), 0, false};
      t.entries.emplace(key, entry);
      const std::string& file = candidates.size() > 1 ? choice_file(t) : std::string();
      const int kept = file.empty() ? -1 : read_choice(file, entry->choice);
      if (kept >= 0) {  // measured by an earlier process on this machine
        entry->choice.chosen = kept;
        entry->choice.from_file = true;
        entry->order = t.made++;
        entry->done = true;
      } else {
        measure = true;
      }
    } else {
      entry = it->second;
      t.ready.wait(lock, [&] { return entry->done; });
      const auto again = t.entries.find(key);
      if (again == t.entries.end() || again->second != entry) {  // its measurement failed: try again
        lock.unlock();
        return run_measured(family, shape, candidates, run, restore);
      }
    }
  }
  if (!measure) {
    run_named(entry->choice, run);
    return entry->choice.chosen;
  }
  try {
    measure_entry(*entry, run, restore);
  } catch (...) {  // forget the shape (a waiting thread measures it again) and pass the error on
    std::lock_guard<std::mutex> lock(t.mu);
    t.entries.erase(key);
    entry->done = true;
    t.ready.notify_all();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(t.mu);
    entry->order = t.made++;
    entry->done = true;
    if (candidates.size() > 1 && !choice_file(t).empty()) append_choice(t.file, entry->choice);
  }
  t.ready.notify_all();
  return entry->choice.chosen;
}

std::vector<MeasuredChoice> measured_choices() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<std::pair<size_t, MeasuredChoice>> done;
  for (const auto& [key, e] : t.entries)
    if (e->done) done.emplace_back(e->order, e->choice);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<MeasuredChoice> out;
  for (auto& [order, c] : done) out.push_back(std::move(c));
  return out;
}

void forget_measured_choices() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.entries.clear();
  t.made = 0;
}

std::string measured_choice_file() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return choice_file(t);
}

void set_measured_choice_file(const std::string& file) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.file = file;
  t.file_set = true;
}

}  // namespace ember::kernels::cpu
