// EMBER_SIMT_* environment settings (docs/simt.md lists them), read once on first use.

#include <cstdlib>
#include <cstring>
#include <utility>

#include "internal.h"

namespace ember::simt::detail {

namespace {

Order parse_order(const char* name, const char* v) {
  if (v == nullptr || *v == '\0' || !std::strcmp(v, "forward")) return Order::Forward;
  if (!std::strcmp(v, "reverse")) return Order::Reverse;
  if (!std::strcmp(v, "random")) return Order::Random;
  fatal("%s=%s: expected forward, reverse or random", name, v);
}

size_t parse_size(const char* name, const char* v, size_t fallback) {
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') fatal("%s=%s: expected a number", name, v);
  return static_cast<size_t>(n);
}

bool parse_flag(const char* v, bool fallback) {
  if (v == nullptr || *v == '\0') return fallback;
  return !(v[0] == '0' && v[1] == '\0');
}

Config load() {
  Config c;
  // EMBER_SIMT_PERTURB=<seed>: random thread and block order with that seed, in one variable
  // (ctest's ENVIRONMENT property cannot pass a list through catch_discover_tests).
  const char* perturb = std::getenv("EMBER_SIMT_PERTURB");
  const bool perturbed = perturb != nullptr && *perturb != '\0';
  if (perturbed) {
    c.schedule = c.block_order = Order::Random;
    c.seed = parse_size("EMBER_SIMT_PERTURB", perturb, c.seed);
  }
  if (const char* v = std::getenv("EMBER_SIMT_SCHEDULE"); v || !perturbed) c.schedule = parse_order("EMBER_SIMT_SCHEDULE", v);
  if (const char* v = std::getenv("EMBER_SIMT_BLOCK_ORDER"); v || !perturbed)
    c.block_order = parse_order("EMBER_SIMT_BLOCK_ORDER", v);
  c.seed = parse_size("EMBER_SIMT_SEED", std::getenv("EMBER_SIMT_SEED"), c.seed);
  c.poison = parse_flag(std::getenv("EMBER_SIMT_POISON"), true);
  c.defer = parse_flag(std::getenv("EMBER_SIMT_DEFER"), false);
  if (const char* v = std::getenv("EMBER_SIMT_EXIT_AT_BARRIER"); v && *v) {
    if (!std::strcmp(v, "allow")) c.exit_at_barrier_allowed = true;
    else if (std::strcmp(v, "error") != 0) fatal("EMBER_SIMT_EXIT_AT_BARRIER=%s: expected error or allow", v);
  }
  c.stack_bytes = parse_size("EMBER_SIMT_STACK_KB", std::getenv("EMBER_SIMT_STACK_KB"), 64) * 1024;
  if (c.stack_bytes < 16 * 1024) fatal("EMBER_SIMT_STACK_KB must be at least 16");
  c.devices = static_cast<int>(parse_size("EMBER_SIMT_DEVICES", std::getenv("EMBER_SIMT_DEVICES"), 2));
  c.device_memory = parse_size("EMBER_SIMT_DEVICE_MEMORY", std::getenv("EMBER_SIMT_DEVICE_MEMORY"), c.device_memory);
  c.flat_threads = static_cast<int>(parse_size("EMBER_SIMT_FLAT_THREADS", std::getenv("EMBER_SIMT_FLAT_THREADS"), 0));
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = load();
  return c;
}

const char* order_name(Order o) {
  switch (o) {
    case Order::Forward: return "forward";
    case Order::Reverse: return "reverse";
    case Order::Random: return "random";
  }
  return "?";
}

void make_order(unsigned* order, unsigned n, Order how, Rng& rng) {
  for (unsigned i = 0; i < n; ++i) order[i] = how == Order::Reverse ? n - 1 - i : i;
  if (how == Order::Random)
    for (unsigned i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
}

bool defer_enabled() { return config().defer || capture_active(); }

}  // namespace ember::simt::detail
