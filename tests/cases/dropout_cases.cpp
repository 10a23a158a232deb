// Gradcheck cases for dropout: the Generator is created inside fn, so every call draws the same
// mask.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;
}  // namespace

void add_dropout_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "dropout/train", .inputs = {{4, 5}},
               .fn = [](const V& x) {
                 Generator gen(42);
                 return dropout(x[0], 0.3, true, gen);
               }});
  c.push_back({.name = "dropout/chain", .inputs = {{3, 4}},
               .fn = [](const V& x) {
                 Generator gen(7);
                 return dropout(tanh(x[0]), 0.5, true, gen) * 2.0;
               }});
}

}  // namespace ember::testing
