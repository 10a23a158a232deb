// The emulator's error reports. Every check that finds a bug in a kernel ends here: one line
//   [simt] ERROR: <what, with file:line> in kernel K block (x,y,z)
// on stderr (the kernel part when a kernel runs on this OS thread), optional detail lines, then
// abort() — a bug in a kernel is not an exception the program could handle.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "internal.h"

namespace ember::simt::detail {

namespace {

std::mutex& report_mutex() {
  static std::mutex m;
  return m;
}

[[noreturn]] void report_and_abort(const std::string& detail, const char* fmt, va_list ap) {
  std::lock_guard<std::mutex> lock(report_mutex());
  char msg[2048];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  const ExecContext& ctx = tls_exec;
  if (ctx.mode != Mode::Host && ctx.kernel_name != nullptr)
    std::fprintf(stderr, "[simt] ERROR: %s in kernel %s block (%u,%u,%u)\n", msg, ctx.kernel_name, ctx.block_idx.x,
                 ctx.block_idx.y, ctx.block_idx.z);
  else
    std::fprintf(stderr, "[simt] ERROR: %s\n", msg);
  if (!detail.empty()) std::fputs(detail.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report_and_abort(std::string(), fmt, ap);
}

void fatal_with_detail(const std::string& detail, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report_and_abort(detail, fmt, ap);
}

void warn(const char* fmt, ...) {
  std::lock_guard<std::mutex> lock(report_mutex());
  va_list ap;
  va_start(ap, fmt);
  std::fputs("[simt] warning: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

std::string site_string(Site s) {
  return std::string(s.file ? s.file : "?") + ":" + std::to_string(s.line);
}

bool same_site(Site a, Site b) {
  return a.line == b.line && (a.file == b.file || (a.file && b.file && std::strcmp(a.file, b.file) == 0));
}

void fatal_outside_kernel(const char* what, Site site) {
  fatal("%s called outside of a kernel at %s", what, site_string(site).c_str());
}

void fatal_in_flat_kernel(const char* what, Site site) {
  fatal("%s at %s inside an EMBER_LAUNCH_FLAT kernel: flat kernels run their threads as plain loops and may "
        "not use barriers, warp intrinsics or shared memory (launch it with EMBER_LAUNCH)",
        what, site_string(site).c_str());
}

void fatal_misaligned_vector(const void* p, unsigned bytes, Site site) {
  fatal("misaligned %u-byte vector access at %s: address %p is not a multiple of %u (a GPU faults: "
        "cudaErrorMisalignedAddress; Note [Vector access alignment] in kernels/simt/simt.h)",
        bytes, site_string(site).c_str(), p, bytes);
}

}  // namespace ember::simt::detail
