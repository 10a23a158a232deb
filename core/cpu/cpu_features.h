#pragma once
// What this x86-64 CPU can run, read from CPUID (and, for the AVX and AVX-512 register state,
// from XGETBV: an instruction set counts only when the operating system saves its registers).
// The fast CPU paths are chosen from these features, never from a table of CPU models (Note
// [BLAS kernels by CPU features] in blas.cpp): a CPU newer than every library on the machine still
// reports AVX-512 and gets the AVX-512 path.

#include <string>

namespace ember {

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"
  int family = 0, model = 0, stepping = 0;  // display family/model (extended fields folded in)
  bool sse3 = false, ssse3 = false, sse41 = false, sse42 = false;
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false;
};

// The features of the CPU this process runs on (read once).
const CpuFeatures& cpu_features();

// Instruction-set levels, each implying the ones before it, as the kernels use them.
enum class IsaLevel {
  sse2,    // every x86-64 CPU
  avx,     // AVX (256-bit float)
  avx2,    // AVX2 + FMA
  avx512,  // AVX-512 F + DQ + BW + VL (Skylake-SP and later, Zen 4 and later)
};
IsaLevel widest_isa(const CpuFeatures& f);
const char* isa_name(IsaLevel level);  // "SSE2", "AVX", "AVX2+FMA", "AVX-512"
// The features present, lower-case and space-separated: "sse4.2 avx avx2 fma f16c avx512f ...".
std::string feature_list(const CpuFeatures& f);

// Note [AMX tile permission]
// AMX's tile data is 8 KB of register state per thread, too large for the signal frames and
// context switches of every process, so Linux (5.16 and later) leaves it off until a process asks:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) grants it to the whole process (every
// thread, present and future); a tile instruction without it raises SIGILL. amx_tiles_status()
// asks once, the first time it is called, and remembers the answer. The kernel may refuse (an
// older kernel, a seccomp filter, a sigaltstack too small for the larger signal frame): the
// AMX kernels are then not used, and `ember info` prints why.
enum class AmxPermission {
  granted,    // the CPU has AMX-TILE and AMX-BF16, and Linux granted tile data to this process
  refused,    // the CPU has them, but the request failed (detail says how)
  no_amx,     // the CPU (or the operating system's XCR0) has no AMX tile state
};
struct AmxStatus {
  AmxPermission permission = AmxPermission::no_amx;
  std::string detail;  // e.g. "granted by arch_prctl(ARCH_REQ_XCOMP_PERM)" or "refused: Invalid argument"
};
const AmxStatus& amx_tiles_status();

}  // namespace ember
