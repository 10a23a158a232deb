#pragma once
// Kernel paths chosen by measurement, once per shape and process (Note [Kernels chosen by
// measurement] in measured_choice.cpp): the bf16 GEMM's kernel per product shape (amx,
// avx512_bf16, f32) and the convolutions' algorithm per layer and pass (Winograd or im2col).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ember::kernels::cpu {

// One choice made: what was measured (the family, e.g. "gemm_bf16", and the shape, e.g.
// "NN 64x2156x288, 1 thread"), each candidate's best time and the one taken.
struct MeasuredChoice {
  std::string family, shape;
  std::vector<std::string> candidates;
  std::vector<double> seconds;  // per candidate: the best of its timed runs (0 when read from the file)
  int chosen = 0;
  bool from_file = false;  // taken from measured_choice_file(), measured by an earlier process
};

// Runs the operation on the path chosen for (family, shape, candidates) and returns that path's
// index. The first time the three are seen in this process, the choice is taken from
// measured_choice_file() if an earlier process on this machine made it; otherwise every
// candidate runs in turn, timed (the calling thread's CPU time),
// kMeasureRounds times (restore() before each run puts back what a run overwrites but also
// reads, e.g. C when beta != 0; it may be empty); the fastest is chosen and cached, and the
// operation's outputs are left as the chosen path computed them (it runs once more unless it ran
// last). Later calls run the chosen path alone. run(i) computes the whole operation with
// candidate i. Thread-safe: a thread that meets a shape another thread is measuring waits for its
// choice. With the profiler on, the run is a scope named "<family> <shape>: <candidate>" (the
// measuring runs "<family> <shape>: measuring").
int run_measured(const std::string& family, const std::string& shape, const std::vector<std::string>& candidates,
                 const std::function<void(int)>& run, const std::function<void()>& restore = {});
constexpr int kMeasureRounds = 3;

// Every choice made so far in this process, in the order made.
std::vector<MeasuredChoice> measured_choices();
// Forgets every choice this process made or read (tests and benchmarks that time the paths again;
// the file is not changed). Not thread-safe with operations in flight.
void forget_measured_choices();

// The file that keeps choices between processes on this machine: EMBER_KERNEL_CHOICES (its value
// "off": none), else $XDG_CACHE_HOME/ember/kernel-choices.tsv, else
// $HOME/.cache/ember/kernel-choices.tsv; "" for none. set_measured_choice_file("") keeps choices
// in this process only (benchmarks that measure afresh, tests).
std::string measured_choice_file();
void set_measured_choice_file(const std::string& file);

}  // namespace ember::kernels::cpu
