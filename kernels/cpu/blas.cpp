// OpenBLAS's kernels chosen from the CPU's features (blas.h).
//
// Note [BLAS kernels by CPU features]
// ember's CPU matrix products (and, through im2col, its convolutions) are OpenBLAS calls. A
// DYNAMIC_ARCH OpenBLAS — Debian's is one — carries kernels for every x86-64 generation and picks
// one when it loads, from a table of CPU *models*. A model newer than the table gets the oldest
// kernels: Debian 12's OpenBLAS 0.3.21 runs its Prescott (SSE3, 2004) kernels on an Intel Xeon of
// family 6 model 207 that has AVX-512, at a fifth of the speed its SkylakeX kernels reach there
// (sgemm 1024³: 22.6 against 110 GFLOP/s on one thread), and the default training recipe took 9
// minutes instead of 2.
//
// So ember decides by *features*, which every CPU reports the same way (cpu_features.h):
//   AVX-512 F+DQ+BW+VL -> SkylakeX,   AVX2+FMA -> Haswell,   AVX -> Sandybridge,
// and when OpenBLAS's own choice uses less than that, ember switches it before the first GEMM:
// OPENBLAS_CORETYPE set for the moment of the call, then gotoblas_dynamic_quit() and
// gotoblas_dynamic_init() — the two functions OpenBLAS itself runs at load and unload, exported by
// every DYNAMIC_ARCH build — make it select again, by name. ember never lowers OpenBLAS's choice
// (on a Zen 4 it already picks SkylakeX), and a user's OPENBLAS_CORETYPE is obeyed, with a
// warning when it names kernels below the CPU. An OpenBLAS built for one target (no
// DYNAMIC_ARCH) cannot switch: the functions are weak symbols, absent there, and `ember info` says
// which kernels run and warns when they are below the CPU.
//
// Why not another library: oneDNN (Debian's 2.6) and BLIS also dispatch by features, but each
// would add a dependency to the build for the same kernels OpenBLAS already carries; the switch is
// forty lines, and the test (tests/test_blas_paths.cpp) runs every kernel path this CPU can run
// against the reference GEMM, so a fallback path is exercised in CI, not only the one picked.

#include "blas.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

extern "C" {
// DYNAMIC_ARCH OpenBLAS: (re)select the kernels, honouring OPENBLAS_CORETYPE; forget the choice.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace ember::kernels::cpu {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string current_core() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

// The kernels ember wants for this CPU (empty: none better than any).
std::string wanted_core(IsaLevel isa) {
  switch (isa) {
    case IsaLevel::avx512: return "SkylakeX";
    case IsaLevel::avx2: return "Haswell";
    case IsaLevel::avx: return "Sandybridge";
    case IsaLevel::sse2: return "";
  }
  return "";
}

bool switch_core(const std::string& core) {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return false;
  const std::optional<std::string> saved =
      std::getenv("OPENBLAS_CORETYPE") ? std::optional<std::string>(std::getenv("OPENBLAS_CORETYPE")) : std::nullopt;
  const auto reselect = [](const std::string& name) {
    setenv("OPENBLAS_CORETYPE", name.c_str(), 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
  };
  const std::string before = current_core();
  reselect(core);
  const bool took = lower(current_core()) == lower(core);
  if (!took) reselect(before);
  if (saved)
    setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  return took;
}

BlasInfo choose() {
  BlasInfo info;
  const char* config = openblas_get_config();
  info.library = config ? config : "OpenBLAS";
  info.switchable = gotoblas_dynamic_init != nullptr && gotoblas_dynamic_quit != nullptr;
  const IsaLevel cpu_isa = widest_isa(cpu_features());
  const std::string picked = current_core();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced != nullptr && *forced != '\0') {
    info.chosen_by = std::string("OPENBLAS_CORETYPE=") + forced;
  } else if (blas_core_isa(picked) < cpu_isa && info.switchable && switch_core(wanted_core(cpu_isa))) {
    info.chosen_by = "ember, from the CPU's features (OpenBLAS had chosen " + picked + ")";
  } else {
    info.chosen_by = "OpenBLAS";
  }
  info.core = current_core();
  info.core_isa = blas_core_isa(info.core);
  if (info.core_isa < cpu_isa) {
    info.warning = "ember: warning: OpenBLAS runs its " + info.core + " kernels (" + isa_name(info.core_isa) +
                   ") on a CPU with " + isa_name(cpu_isa) + " (" + info.chosen_by +
                   "): matrix products and convolutions run several times slower than they could";
  }
  return info;
}

BlasInfo& state() {
  static BlasInfo info = [] {
    BlasInfo i = choose();
    if (!i.warning.empty()) std::fprintf(stderr, "%s\n", i.warning.c_str());
    return i;
  }();
  return info;
}

}  // namespace

const BlasInfo& blas_info() { return state(); }

bool set_blas_core(const std::string& core) {
  BlasInfo& info = state();
  if (!switch_core(core)) return false;
  info.core = current_core();
  info.core_isa = blas_core_isa(info.core);
  info.chosen_by = "set_blas_core(\"" + core + "\")";
  return true;
}

const BlasInfo& choose_blas_kernels_again() {
  BlasInfo& info = state();
  info = choose();
  return info;
}

IsaLevel blas_core_isa(const std::string& core) {
  const std::string c = lower(core);
  if (c == "skylakex" || c == "cooperlake" || c == "sapphirerapids") return IsaLevel::avx512;
  if (c == "haswell" || c == "zen" || c == "excavator" || c == "steamroller") return IsaLevel::avx2;
  if (c == "sandybridge" || c == "bulldozer" || c == "piledriver") return IsaLevel::avx;
  return IsaLevel::sse2;
}

}  // namespace ember::kernels::cpu
