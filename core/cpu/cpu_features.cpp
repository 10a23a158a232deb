// CPUID and XGETBV, read once (cpu_features.h).

#include "cpu_features.h"

#include <cerrno>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define EMBER_X86 1
#else
#define EMBER_X86 0
#endif

namespace ember {

namespace {

#if EMBER_X86
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.a, r.b, r.c, r.d);
  return r;
}

bool bit(unsigned v, int i) { return ((v >> i) & 1u) != 0; }

// XCR0: which register states the operating system saves on a context switch.
uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures read_features() {
  CpuFeatures f;
  const Regs v0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &v0.b, 4);
  std::memcpy(vendor + 4, &v0.d, 4);
  std::memcpy(vendor + 8, &v0.c, 4);
  f.vendor = vendor;
  const unsigned max_leaf = v0.a;

  const Regs v1 = cpuid(1);
  const unsigned base_family = (v1.a >> 8) & 0xf, base_model = (v1.a >> 4) & 0xf;
  f.family = static_cast<int>(base_family == 0xf ? base_family + ((v1.a >> 20) & 0xff) : base_family);
  f.model = static_cast<int>(base_family == 0x6 || base_family == 0xf ? (((v1.a >> 16) & 0xf) << 4) | base_model
                                                                       : base_model);
  f.stepping = static_cast<int>(v1.a & 0xf);
  f.sse3 = bit(v1.c, 0);
  f.ssse3 = bit(v1.c, 9);
  f.sse41 = bit(v1.c, 19);
  f.sse42 = bit(v1.c, 20);
  f.fma = bit(v1.c, 12);
  f.f16c = bit(v1.c, 29);
  const bool osxsave = bit(v1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm_state = (xcr & 0x6) == 0x6;    // SSE and AVX registers
  const bool zmm_state = (xcr & 0xe6) == 0xe6;  // plus opmask, upper ZMM halves, ZMM16-31
  const bool amx_state = (xcr & 0x60000) == 0x60000;
  f.avx = bit(v1.c, 28) && ymm_state;
  f.fma = f.fma && f.avx;
  f.f16c = f.f16c && f.avx;

  if (max_leaf >= 7) {
    const Regs v7 = cpuid(7, 0);
    f.avx2 = bit(v7.b, 5) && ymm_state;
    f.avx512f = bit(v7.b, 16) && zmm_state;
    f.avx512dq = bit(v7.b, 17) && f.avx512f;
    f.avx512cd = bit(v7.b, 28) && f.avx512f;
    f.avx512bw = bit(v7.b, 30) && f.avx512f;
    f.avx512vl = bit(v7.b, 31) && f.avx512f;
    f.avx512_vnni = bit(v7.c, 11) && f.avx512f;
    f.avx512_fp16 = bit(v7.d, 23) && f.avx512f;
    f.amx_bf16 = bit(v7.d, 22) && amx_state;
    f.amx_tile = bit(v7.d, 24) && amx_state;
    if (cpuid(7, 0).a >= 1) f.avx512_bf16 = bit(cpuid(7, 1).a, 5) && f.avx512f;
  }

  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
    std::string s = brand;
    const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
    f.model_name = first == std::string::npos ? "" : s.substr(first, last - first + 1);
  }
  return f;
}
#else
CpuFeatures read_features() { return CpuFeatures{.vendor = "unknown", .model_name = "not an x86-64 CPU"}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = read_features();
  return features;
}

IsaLevel widest_isa(const CpuFeatures& f) {
  if (f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl) return IsaLevel::avx512;
  if (f.avx2 && f.fma) return IsaLevel::avx2;
  if (f.avx) return IsaLevel::avx;
  return IsaLevel::sse2;
}

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::sse2: return "SSE2";
    case IsaLevel::avx: return "AVX";
    case IsaLevel::avx2: return "AVX2+FMA";
    case IsaLevel::avx512: return "AVX-512";
  }
  return "?";
}

std::string feature_list(const CpuFeatures& f) {
  const std::pair<bool, const char*> all[] = {
      {f.sse3, "sse3"},         {f.ssse3, "ssse3"},         {f.sse41, "sse4.1"},
      {f.sse42, "sse4.2"},      {f.avx, "avx"},             {f.avx2, "avx2"},
      {f.fma, "fma"},           {f.f16c, "f16c"},           {f.avx512f, "avx512f"},
      {f.avx512dq, "avx512dq"}, {f.avx512cd, "avx512cd"},   {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"}, {f.avx512_vnni, "avx512_vnni"}, {f.avx512_bf16, "avx512_bf16"},
      {f.avx512_fp16, "avx512_fp16"}, {f.amx_tile, "amx_tile"}, {f.amx_bf16, "amx_bf16"}};
  std::string s;
  for (const auto& [present, name] : all)
    if (present) s += (s.empty() ? "" : " ") + std::string(name);
  return s;
}

namespace {

// arch_prctl codes and the tile-data state component (linux/arch/x86/include/uapi/asm/prctl.h).
constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;

AmxStatus ask_for_amx() {
  const CpuFeatures& f = cpu_features();
  if (!f.amx_tile || !f.amx_bf16) return {AmxPermission::no_amx, "no AMX-TILE/AMX-BF16 on this CPU"};
#if defined(__linux__) && defined(SYS_arch_prctl)
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return {AmxPermission::refused, std::string("refused by arch_prctl(ARCH_REQ_XCOMP_PERM): ") + std::strerror(errno)};
  uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !((granted >> kXfeatureXtiledata) & 1u))
    return {AmxPermission::refused, "arch_prctl(ARCH_GET_XCOMP_PERM) does not list tile data"};
  return {AmxPermission::granted, "tile data granted by arch_prctl(ARCH_REQ_XCOMP_PERM)"};
#else
  return {AmxPermission::refused, "no arch_prctl on this operating system"};
#endif
}

}  // namespace

const AmxStatus& amx_tiles_status() {
  static const AmxStatus status = ask_for_amx();
  return status;
}

}  // namespace ember
