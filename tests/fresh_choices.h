#pragma once
// For a test's lifetime, the process's measured kernel choices are its own (Note [Kernels chosen by
// measurement] in kernels/cpu/measured_choice.h): no choices file, and none made yet; the file and
// the choices are put back after.

#include <ember/kernels/cpu/measured_choice.h>
#include <string>

namespace ember::testing {

struct FreshChoices {
  std::string file = kernels::cpu::measured_choice_file();
  FreshChoices() {
    kernels::cpu::set_measured_choice_file("");
    kernels::cpu::forget_measured_choices();
  }
  ~FreshChoices() {
    kernels::cpu::forget_measured_choices();
    kernels::cpu::set_measured_choice_file(file);
  }
  FreshChoices(const FreshChoices&) = delete;
  FreshChoices& operator=(const FreshChoices&) = delete;
};

}  // namespace ember::testing
