#include "interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>

#include "../io/atomic_file.h"

namespace ember::train {

namespace {

volatile std::sig_atomic_t g_interrupts = 0;
volatile std::sig_atomic_t g_announce = 1;

extern "C" void on_interrupt(int sig) {
  if (g_interrupts > 0) {
    static const char msg[] = "ember train: interrupted again; exiting now without saving\n";
    if (::write(2, msg, sizeof msg - 1) < 0) {
      // Nothing to do: the process ends either way.
    }
    io::remove_temp_files_now();  // a save in progress leaves no temporary file (io/atomic_file.h)
    ::_exit(128 + sig);
  }
  g_interrupts = 1;
  if (g_announce) {
    static const char msg[] =
        "ember train: interrupted; finishing the current step and saving (interrupt again to exit at once)\n";
    if (::write(2, msg, sizeof msg - 1) < 0) {
      // As above.
    }
  }
}

}  // namespace

struct InterruptHandlers::Saved {
  struct sigaction old_int {}, old_term {}, old_hup {};
};

InterruptHandlers::InterruptHandlers(bool announce) : saved_(std::make_unique<Saved>()) {
  g_interrupts = 0;
  g_announce = announce ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &saved_->old_int);
  ::sigaction(SIGTERM, &sa, &saved_->old_term);
  ::sigaction(SIGHUP, &sa, &saved_->old_hup);  // the terminal went away: save, as for the others
}

InterruptHandlers::~InterruptHandlers() {
  ::sigaction(SIGINT, &saved_->old_int, nullptr);
  ::sigaction(SIGTERM, &saved_->old_term, nullptr);
  ::sigaction(SIGHUP, &saved_->old_hup, nullptr);
}

bool interrupt_requested() { return g_interrupts > 0; }

}  // namespace ember::train
