// EarlyStopping (Note [Plateaus and early stopping] in early_stopping.h).

#include "early_stopping.h"

#include <cmath>

#include "../core/error.h"

namespace ember::train {

EarlyStopping::EarlyStopping(Mode mode, int64_t patience)
    : mode_(mode), patience_(patience), best_(mode == Mode::min ? INFINITY : -INFINITY) {
  EMBER_CHECK(patience >= 1, "EarlyStopping: patience must be at least 1, got ", patience);
}

bool EarlyStopping::step(double metric, int64_t at) {
  ++evaluations_;
  const bool better = mode_ == Mode::min ? metric < best_ : metric > best_;
  if (better) {
    best_ = metric;
    best_at_ = at;
    bad_ = 0;
  } else {
    ++bad_;
  }
  return should_stop();
}

std::map<std::string, double> EarlyStopping::state_dict() const {
  return {{"best", best_},
          {"bad", static_cast<double>(bad_)},
          {"evaluations", static_cast<double>(evaluations_)},
          {"best_at", static_cast<double>(best_at_)}};
}

void EarlyStopping::load_state_dict(const std::map<std::string, double>& state) {
  const auto get = [&](const char* key) {
    const auto it = state.find(key);
    EMBER_CHECK(it != state.end(), "EarlyStopping::load_state_dict: no '", key, "' in the state");
    return it->second;
  };
  const double best = get("best"), bad = get("bad"), evaluations = get("evaluations"), at = get("best_at");
  best_ = best;
  bad_ = static_cast<int64_t>(bad);
  evaluations_ = static_cast<int64_t>(evaluations);
  best_at_ = static_cast<int64_t>(at);
}

}  // namespace ember::train
