#include "../op_cases.h"

namespace ember::testing {

void add_reduce_cases(std::vector<OpCase>& cases) {
  (void)cases;  // cases are added as the ops land
}

}  // namespace ember::testing
