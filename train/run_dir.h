#pragma once
// What ember owns in a run directory (--save DIR): how it recognises its own files, what it
// removes and when, and the output paths it refuses (docs/training.md, "What ember owns in a run
// directory"). Used by the checkpoint writer (train/checkpoint.cpp), the trainer, `ember
// report` and `ember export`.
//
// Note [Run directory ownership]
// A run directory holds ember's files and may hold anything of the user's. ember's are, by exact
// name (never a prefix):
//   checkpoint.json                 the manifest (Note [Checkpoint sets] in train/checkpoint.h)
//   step-<8+ digits>[-<k>]/         a step directory, when the manifest names it or its marker
//                                   exists; of what is inside, model.safetensors and
//                                   state.safetensors (and their temporary files) only
//   .step-<...>.ember-unlisted      a step directory's marker: "this directory is ember's and no
//                                   manifest lists it". A save writes it before it makes the
//                                   directory and removes it once the new manifest names the
//                                   directory; a directory the manifest stops naming is marked
//                                   again before the new manifest is written, then emptied and
//                                   removed
//   metrics.jsonl, evaluation.json, report.html    when the manifest exists; without one,
//                                   metrics.jsonl whose first line is ember's `config` event (a
//                                   run that stopped before its first save)
//   .<name>.tmp-<pid>-<n>-<r>       temporary files (Note [Temporary files] in io/atomic_file.h)
// Everything else is the user's: ember neither writes it nor removes it (a directory named
// step-by-step-notes/ or step-00000024-keep/, a file of the user's inside a step directory).
//
// When a run opens the directory (under its lock) it removes what an interrupted save left —
// marked step directories the manifest does not name, markers of directories it does name,
// stale temporary files — and says what it removed, by count and name, even with --quiet. It
// refuses, with an error naming the path:
//   - checkpoint.json, metrics.jsonl, evaluation.json or report.html that is not a regular file
//     (a symlink, a FIFO, a device): ember neither writes through nor replaces it;
//   - for a new run without --overwrite: step directories with ember's names but neither a
//     manifest nor markers (a run whose checkpoint.json was lost: its checkpoints are complete
//     and are not ember's to remove), and evaluation.json, report.html or a metrics.jsonl that no
//     manifest accounts for.
// --overwrite says, by count and name, what the new run replaces, and replaces it at the run's
// first save; until then the earlier run's checkpoint and history stay as they were.
//
// Output paths (--save-weights, --profile-trace, --metrics, `report --out`, `export`'s output)
// are checked against the run directories concerned (the run's own, and any directory holding
// a checkpoint.json): none of them may name a run's own file, a step directory or a file inside
// one. The one exception is a report: `report --out` may name a run's report.html.

#include <string>
#include <vector>

namespace ember::train {

// Whether `name` is a step directory's name as ember makes them: "step-", 8 or more digits, and
// optionally "-" and a number (the second directory for the same step).
bool is_step_dir_name(const std::string& name);
// The marker of step directory `step` (Note [Run directory ownership]).
std::string step_marker_name(const std::string& step);
// Writes DIR/<marker of step> (nothing when it exists) and syncs it and the directory.
void write_step_marker(const std::string& dir, const std::string& step);

// How a run is going to use a directory.
enum class RunDirUse {
  new_run,     // --save DIR
  overwrite,   // --save DIR --overwrite
  continuing,  // --resume DIR: the run whose checkpoint is in DIR
};

// What survey_run_dir found (names relative to the directory).
struct RunDirSurvey {
  bool manifest = false;                    // a readable checkpoint.json
  std::string manifest_run;                 // its run id
  std::vector<std::string> named;           // step directories the manifest names
  std::vector<std::string> unlisted;        // marked step directories it does not name
  std::vector<std::string> stray_markers;   // markers of named directories, or of none
  std::vector<std::string> orphans;         // step directories without a marker, and no manifest
  std::vector<std::string> run_files;       // metrics.jsonl, evaluation.json, report.html present
  std::vector<std::string> foreign_files;   // of those, the ones nothing says are ember's
};

// Looks at DIR without changing anything and throws ember::Error naming the path for what
// Note [Run directory ownership] refuses for `use`. A directory that does not exist is empty.
RunDirSurvey survey_run_dir(const std::string& dir, RunDirUse use);

// Removes step directory DIR/step (a name is_step_dir_name accepts): marks it, removes ember's
// files in it, the directory, then the marker. A directory that holds anything else is left in
// place, unmarked, with a line on stderr saying so. Returns what it removed, relative to DIR.
std::vector<std::string> remove_step_dir(const std::string& dir, const std::string& step);

// Refuses (ember::Error: "<option> '<path>' is ...") an output path that names a run
// directory's own file, a step directory or a file inside one; a run directory is one holding a
// checkpoint.json, or one of `run_dirs` (the run's own, before it has saved). `allowed`: a run
// file name the option may write (report.html for `report --out`).
void check_output_path(const std::string& option, const std::string& path,
                       const std::vector<std::string>& run_dirs = {}, const std::string& allowed = "");

// "a, b, c and 4 more": names for a message (it stays one line), at most `at_most` of them.
std::string join_names(const std::vector<std::string>& names, size_t at_most = 12);

// Whether `a` and `b` name the same place (existing or not).
bool same_path(const std::string& a, const std::string& b);

}  // namespace ember::train
