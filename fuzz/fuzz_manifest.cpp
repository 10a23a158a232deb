// libFuzzer target: the checkpoint manifest parser (train::parse_manifest), with the checks of
// fuzz/parser_targets.h. A finding aborts, so libFuzzer saves the input.
//
//   cmake --build build-fuzz --target fuzz_manifest      (the build of docs/data.md, "Fuzzing")
//   build/tests/ember_fuzz_parsers manifest --seeds corpus-manifest
//   build-fuzz/fuzz/fuzz_manifest corpus-manifest -max_total_time=600 -rss_limit_mb=2048

#include <cstdio>
#include <cstdlib>

#include "parser_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::fuzz::manifest_one({data, size});
  } catch (const ember::fuzz::Finding& f) {
    std::fprintf(stderr, "fuzz_manifest: %s\n", f.what());
    std::abort();
  }
  return 0;
}
