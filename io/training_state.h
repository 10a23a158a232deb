#pragma once
// The training-state checkpoint: everything besides the weights that a resumed run needs to
// continue exactly where it stopped (optimizer and scheduler state, epoch/step, RNG state, loader
// position) plus what a later `ember eval` / `ember predict` needs to rebuild the model (its name,
// config and class names).
//
// Note [Training-state file]
// One safetensors file (io/safetensors.h), written atomically:
//   tensors      "optimizer.<name>"   SavedOptimizer::tensors ("optimizer.state.3.exp_avg", ...)
//                "extra.<name>"       TrainingState::extra_tensors
//   __metadata__ "ember.format"   = "ember.training_state.v1"
//                "ember.state"    = every non-tensor field as one JSON document
//                "ember.checksum" = "crc32:<8 hex digits>" over ember.state and, for every tensor
//                                   in name order, its name, dtype, shape and bytes
// The checksum catches what the safetensors checks cannot: a flipped bit in a moment estimate, an
// edited JSON value, a shape changed to another of the same size. PyTorch tools can still open the
// file (it is plain safetensors), which helps debugging.
//
// The optimizer and scheduler classes serialize into this struct (optim/ owns the names); this
// file knows nothing about Adam or StepLR, only about named tensors and typed scalars. The JSON
// lists the tensor names too, so loading checks that the file holds exactly those tensors.

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/tensor.h"

namespace ember::io {

// A scalar in a state dict. PyTorch's param_groups and scheduler states hold floats, ints, bools,
// strings and float lists (Adam's betas, a scheduler's base_lrs); these round-trip exactly,
// including each value's type, and non-finite floats.
using StateValue = std::variant<bool, int64_t, double, std::string, std::vector<double>>;
using StateDict = std::map<std::string, StateValue>;

// The value of `key` as a T; throws ember::Error naming the key when it is missing or holds
// another type. An int64 is accepted where a double is asked for (an lr of 1 saved as an int).
template <typename T>
T state_get(const StateDict& dict, const std::string& key);

// optim/ keeps its state as plain doubles (optim::OptimizerState::scalars, optim::SchedulerState):
// these convert both ways. state_doubles throws for a value that is not a number.
StateDict state_dict_from(const std::map<std::string, double>& values);
std::map<std::string, double> state_doubles(const StateDict& dict);

// An optimizer's state as its class flattens it (Note [Optimizer parameters and state] in
// optim/optimizer.h): tensors named like "state.3.exp_avg", scalars like "state.3.step" and
// "param_groups.0.lr". io/ does not interpret the names; it stores them exactly, in order.
//   saved.tensors = opt.state_dict().tensors;  saved.scalars = state_dict_from(sd.scalars);
struct SavedOptimizer {
  std::string name;  // "Adam", "AdamW", "SGD"; empty: no optimizer saved
  std::vector<std::pair<std::string, Tensor>> tensors;
  StateDict scalars;
};

struct SavedScheduler {
  std::string name;  // "StepLR", "CosineAnnealingLR", ...; empty: no scheduler saved
  StateDict values;  // "last_epoch", "base_lrs.0", "last_lr.0", ...
};

// The global Philox generator (core/generator.h): Generator::set_state(seed, offset) restores it.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Where the data loader was: resuming replays the same shuffle (shuffle_seed, epoch) and skips the
// batches already seen (batch_index = the next batch to load).
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  uint64_t shuffle_seed = 0;
};

struct TrainingState {
  std::string model_name;                           // "simple_cnn", "resnet18", ...
  std::map<std::string, std::string> model_config;  // constructor arguments, as text
  std::vector<std::string> class_names;             // index -> label, as the dataset had them
  int64_t epoch = 0;                                // epochs completed
  int64_t step = 0;                                 // optimizer steps taken
  RngState rng;
  LoaderPosition loader;
  SavedOptimizer optimizer;
  SavedScheduler scheduler;
  StateDict extra;  // anything else: best metric, GradScaler scale, ...
  std::vector<std::pair<std::string, Tensor>> extra_tensors;  // beyond the optimizer's (EMA weights)
};

// Writes `state` to `path` atomically (Note [Training-state file]); tensors on other devices are
// copied to the CPU. Throws ember::Error "<path>: <problem>".
void save_training_state(const std::string& path, const TrainingState& state);

// Reads, validates (safetensors checks, format tag, checksum, every field's type) and returns the
// state, tensors on the CPU. A truncated, garbled or edited file throws ember::Error
// "<path>: <problem>".
TrainingState load_training_state(const std::string& path);

// ---- implementation of state_get -------------------------------------------------------------

namespace detail {
[[noreturn]] void state_get_failed(const std::string& key, const char* wanted, bool missing);
}

template <typename T>
T state_get(const StateDict& dict, const std::string& key) {
  const auto it = dict.find(key);
  if (it == dict.end()) detail::state_get_failed(key, "", true);
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  if constexpr (std::is_same_v<T, double>) {
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  }
  const char* wanted = std::is_same_v<T, bool>          ? "a bool"
                       : std::is_same_v<T, int64_t>     ? "an int"
                       : std::is_same_v<T, double>      ? "a float"
                       : std::is_same_v<T, std::string> ? "a string"
                                                        : "a float list";
  detail::state_get_failed(key, wanted, false);
}

}  // namespace ember::io
