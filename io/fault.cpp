#include "fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

namespace ember::io {

namespace {

// EMBER_FAULT parsed once: "crash:<point>[@k]" -> k, "<key>:<n>" -> n. See Note [Fault injection].
struct Faults {
  std::map<std::string, int64_t> crash;   // point -> the count that crashes
  std::map<std::string, int64_t> values;  // "enospc-file" -> n, ...
  std::map<std::string, int64_t> seen;    // how often each point / kind was reached
  std::mutex mu;
  bool any = false;
};

Faults& faults() {
  static Faults* f = [] {
    auto* f = new Faults;
    const char* env = std::getenv("EMBER_FAULT");
    if (env == nullptr || *env == '\0') return f;
    f->any = true;
    std::stringstream ss(env);
    for (std::string item; std::getline(ss, item, ',');) {
      const size_t colon = item.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = item.substr(0, colon);
      std::string arg = item.substr(colon + 1);
      if (key == "crash") {
        int64_t k = 1;
        if (const size_t at = arg.find('@'); at != std::string::npos) {
          k = std::atoll(arg.c_str() + at + 1);
          arg.resize(at);
        }
        f->crash[arg] = k;
      } else {
        f->values[key] = std::atoll(arg.c_str());
      }
    }
    return f;
  }();
  return *f;
}

}  // namespace

void fault_point(const char* name) {
  Faults& f = faults();
  if (!f.any) return;
  std::lock_guard<std::mutex> lock(f.mu);
  auto it = f.crash.find(name);
  if (it == f.crash.end()) return;
  if (++f.seen[std::string("crash:") + name] == it->second) {
    ::kill(::getpid(), SIGKILL);
    ::_exit(137);  // not reached
  }
}

bool fault_enospc(const char* kind) {
  Faults& f = faults();
  if (!f.any) return false;
  std::lock_guard<std::mutex> lock(f.mu);
  auto it = f.values.find(std::string("enospc-") + kind);
  if (it == f.values.end()) return false;
  return ++f.seen[std::string("enospc-") + kind] == it->second;
}

int64_t fault_value(const char* key) {
  Faults& f = faults();
  if (!f.any) return -1;
  auto it = f.values.find(key);
  return it == f.values.end() ? -1 : it->second;
}

}  // namespace ember::io
