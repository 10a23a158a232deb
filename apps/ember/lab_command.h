#pragma once
// `ember lab list` and `ember lab run LAB`: the kernel labs (kernels/labs, docs/labs.md).
//
// Each lab is a program of its own (build/labs/lab_<name>: on the SIMT emulator in the default
// build, compiled by nvcc in the CUDA flavour), so that a learner can build one .cu file with one
// nvcc command; this command finds those programs and runs them. They are looked for in
// $EMBER_LABS_DIR, else in the labs/ folder next to the ember binary's bin/ folder.

#include <string>

namespace ember::app {

struct LabOptions {
  std::string lab;   // the lab's name: copy, transpose, ...
  int version = -1;  // one version only (an exercise too); -1: every version
  std::string size;  // "A,B,..." for the lab's --size
  bool broken = false, json = false;
};

// Every lab and its versions (the programs' --list), or the error that says how to build them.
void run_lab_list();
// Runs one lab's program with the options; returns its exit status (0: every version correct).
int run_lab(const LabOptions& options);

}  // namespace ember::app
