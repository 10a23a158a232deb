#pragma once
// Fault injection for tests: crash points and failing writes, switched on by the environment.
//
// Note [Fault injection]
// EMBER_FAULT is a testing hook (docs/training.md): a comma-separated list of
//   crash:<point>        the process kills itself with SIGKILL (as `kill -9` would) the first time
//                        it reaches fault_point("<point>")
//   crash:<point>@<k>    ... the k-th time it reaches it
//   enospc-file:<n>      the n-th file written with io::write_file_atomic in this process fails
//                        with ENOSPC at its first write (a disk that fills up between two files)
//   enospc-metrics:<n>   the n-th metrics line fails with ENOSPC after half of it is written
//   oom-eval-above:<b>   an evaluation batch larger than b images fails as out of device memory
//   slow-step-ms:<ms>    every training step sleeps this long (time for a test to send a signal)
//   slow-rename-ms:<ms>  io::write_file_atomic sleeps this long before its rename (its temporary
//                        file is there: time for a test to kill the writer)
//   slow-eval-ms:<ms>    every evaluation batch of ember train sleeps this long (the same, during
//                        an evaluation)
//   nan-loss-at:<k>      ember train's eager step k has a NaN loss (and NaN gradients)
//   amp-growth-interval:<n>  ember train's fp16 loss scaler doubles S after n clean steps instead
//                        of 2000, so that a short run overflows and skips steps again and again
// Unset (the normal case) every hook is one branch on a cached flag. The points are named where
// they are called (grep fault_point); tests/cli/robust.sh, tests/cli/hostile_files.sh and
// tests/cli/hostile_inputs.sh use them, and tests/cli/train_cuda_graphs.sh uses amp-growth-interval.

#include <cstdint>
#include <string>

namespace ember::io {

// Kills the process (SIGKILL) when EMBER_FAULT names this point (and its count is reached).
void fault_point(const char* name);
// Counts an event of `kind` ("file", "metrics") and returns true when EMBER_FAULT says that this
// one, the n-th, must fail with ENOSPC.
bool fault_enospc(const char* kind);
// The value of EMBER_FAULT's "<key>:<n>" entry, or -1 when there is none.
int64_t fault_value(const char* key);

}  // namespace ember::io
