#pragma once
// SIGINT / SIGTERM / SIGHUP during training (train/trainer.cpp).
//
// Note [Clean interrupts]
// The first SIGINT, SIGTERM or SIGHUP (the terminal closed) only sets a flag. The training loop
// reads it after each step (with several processes every rank all-reduces it together with the
// divergence flag, so all of them stop after the same step), and an evaluation before each batch
// (its ranks all-reduce it with their counts): the run then writes a checkpoint (with --save; the
// checkpoint of an epoch is saved before its evaluation, which an interrupt abandons) and the
// metrics summary, and `ember train` exits 130 with a message that says how to resume. A second
// signal ends the process at once (exit 128 + the signal's number), after removing the temporary
// files of a save in progress (Note [Temporary files] in io/atomic_file.h). run_training installs
// the handlers and puts the previous ones back when it returns.

#include <memory>

namespace ember::train {

// Installs the handlers for SIGINT, SIGTERM and SIGHUP (announce: print a line when the first arrives);
// the destructor puts the previous ones back.
class InterruptHandlers {
 public:
  explicit InterruptHandlers(bool announce);
  ~InterruptHandlers();
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// Whether a first signal arrived since the handlers were installed.
bool interrupt_requested();

}  // namespace ember::train
