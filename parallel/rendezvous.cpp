// Rendezvous through a shared file (rendezvous.h, Note [Rendezvous protocol]) and the choice of
// transport; TCP is in rendezvous_tcp.cpp.

#include "rendezvous.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <thread>

#include "../core/error.h"
#include "../io/atomic_file.h"
#include "rendezvous_wire.h"

namespace ember::parallel {

namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// ---- shared file ------------------------------------------------------------------------------

std::string file_who(const std::string& key, int rank, int world_size) {
  return rendezvous_who("file", key, rank, world_size);
}

fs::path ack_path(const std::string& path, int rank) { return path + ".ack." + std::to_string(rank); }

// Rank 0 removes the rendezvous file and the acks when it leaves, on every path (a failed job
// must not leave a file that blocks the next one).
struct RemoveOnExit {
  std::vector<fs::path> paths;
  ~RemoveOnExit() {
    std::error_code ec;
    for (const fs::path& p : paths) fs::remove(p, ec);
  }
};

// Sleeps `pause` (at most until the deadline) and doubles it up to `max`.
void back_off(std::chrono::milliseconds& pause, std::chrono::milliseconds max, Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left > Clock::duration::zero()) std::this_thread::sleep_for(std::min<Clock::duration>(pause, left));
  pause = std::min(pause * 2, max);
}

std::vector<uint8_t> file_publish(const std::string& path, int world_size, const std::string& key,
                                  const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout,
                                  const std::string& who) {
  const auto deadline = Clock::now() + timeout;
  std::error_code ec;
  EMBER_CHECK(!fs::exists(path, ec), who, ": ", path,
              " already exists, probably left by an earlier job: delete it and start again (an earlier job's id "
              "would make this one hang)");
  RemoveOnExit cleanup{{path}};
  for (int r = 1; r < world_size; ++r) {
    cleanup.paths.push_back(ack_path(path, r));
    fs::remove(ack_path(path, r), ec);  // an earlier job's
  }
  std::vector<uint8_t> bytes;
  put_bytes(bytes, kFileMagic);
  put_u32(bytes, kVersion);
  put_u32(bytes, static_cast<uint32_t>(world_size));
  put_u32(bytes, static_cast<uint32_t>(key.size()));
  put_bytes(bytes, key);
  put_u64(bytes, payload.size());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  try {
    io::write_file_atomic(path, std::span<const uint8_t>(bytes));  // the others never see half a file
  } catch (const Error& e) {
    EMBER_THROW(who, ": ", e.what());
  }

  std::vector<int> pending;
  for (int r = 1; r < world_size; ++r) pending.push_back(r);
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::erase_if(pending, [&](int r) { return fs::exists(ack_path(path, r), ec); });
    if (pending.empty()) return payload;
    EMBER_CHECK(Clock::now() < deadline, who, ": timed out after ", seconds(timeout), ": ", rank_list(pending),
                " did not read ", path, " (each creates ", path,
                ".ack.<rank>); is EMBER_RENDEZVOUS_FILE the same path on every rank, on a file system they all "
                "see? (",
                path, " is removed)");
    back_off(pause, std::chrono::milliseconds(100), deadline);
  }
}

std::vector<uint8_t> file_read(const std::string& path, int rank, int world_size, const std::string& key,
                               std::chrono::milliseconds timeout, const std::string& who) {
  const auto deadline = Clock::now() + timeout;
  std::vector<uint8_t> b;
  std::string read_error;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::error_code ec;
    if (fs::exists(path, ec)) {
      try {
        b = io::read_file(path);  // rank 0 renames a complete file into place
        break;
      } catch (const Error& e) {
        read_error = e.what();  // unreadable, or removed again by a rank 0 that failed
      }
    }
    EMBER_CHECK(Clock::now() < deadline, who, ": ", path, " did not appear within ", seconds(timeout),
                " (is rank 0 running, with the same EMBER_RENDEZVOUS_FILE on a file system every rank sees?)",
                read_error.empty() ? "" : "; last read: " + read_error);
    back_off(pause, std::chrono::milliseconds(100), deadline);
  }
  const size_t fixed = kFileMagic.size() + 3 * 4;
  EMBER_CHECK(b.size() >= fixed && has_prefix(b.data(), b.size(), kFileMagic), who, ": ", path,
              " is not an ember rendezvous file (it starts with ", quoted_bytes(b), ")");
  const uint32_t version = get_u32(b.data() + 8), world = get_u32(b.data() + 12), key_len = get_u32(b.data() + 16);
  EMBER_CHECK(version == kVersion, who, ": ", path, " has format version ", version, ", this ember reads version ",
              kVersion);
  EMBER_CHECK(key_len <= kMaxKeyBytes && b.size() >= fixed + key_len + 8, who, ": ", path, " is truncated");
  const std::string file_key(reinterpret_cast<const char*>(b.data() + fixed), key_len);
  EMBER_CHECK(file_key == key, who, ": ", path, " was written for key '", file_key, "' but this rank expects '", key,
              "' (another job's file?)");
  EMBER_CHECK(world == static_cast<uint32_t>(world_size), who, ": ", path, " was written by rank 0 of a world of ",
              world, " but this rank is in a world of ", world_size, " (is WORLD_SIZE the same on every rank?)");
  const size_t off = fixed + key_len + 8;
  const uint64_t len = get_u64(b.data() + off - 8);
  EMBER_CHECK(len <= kRendezvousMaxPayload && b.size() == off + len, who, ": ", path, " is truncated or corrupt (",
              b.size(), " bytes for a payload of ", len, ")");
  std::vector<uint8_t> payload(b.begin() + static_cast<std::ptrdiff_t>(off), b.end());
  const fs::path ack = ack_path(path, rank);
  std::ofstream out(ack, std::ios::binary | std::ios::trunc);
  EMBER_CHECK(out, who, ": cannot create ", ack.string(), ": ", errno_message(errno));
  return payload;
}

}  // namespace

std::vector<uint8_t> file_broadcast_bytes(const std::string& path, int rank, int world_size, const std::string& key,
                                          const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout) {
  const std::string who = file_who(key, rank, world_size);
  check_args(who, rank, world_size, key, payload);
  if (world_size == 1) return payload;
  EMBER_CHECK(!path.empty(), who, ": no path (EMBER_RENDEZVOUS_FILE)");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  EMBER_CHECK(fs::is_directory(dir, ec), who, ": the directory of ", path, " does not exist (", dir.string(),
              "); create it on a file system every rank sees");
  if (rank == 0) return file_publish(path, world_size, key, payload, timeout, who);
  return file_read(path, rank, world_size, key, timeout, who);
}

std::vector<uint8_t> rendezvous_broadcast(const LaunchInfo& li, const std::string& key,
                                          const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout,
                                          const EnvLookup& lookup) {
  if (li.world_size == 1) return tcp_broadcast_bytes("", 0, li.rank, 1, key, payload, timeout);
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) -> const char* { return std::getenv(n); });
  if (const char* file = env("EMBER_RENDEZVOUS_FILE"); file != nullptr && *file != '\0') {
    return file_broadcast_bytes(file, li.rank, li.world_size, key, payload, timeout);
  }
  // Under torchrun itself MASTER_PORT is taken by torchrun's own TCP store: EMBER_RENDEZVOUS_PORT
  // names another port for ember's.
  int port = li.master_port;
  if (const char* p = env("EMBER_RENDEZVOUS_PORT"); p != nullptr && *p != '\0') {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    EMBER_CHECK(end != p && *end == '\0' && v >= 1 && v <= 65535, "EMBER_RENDEZVOUS_PORT='", p,
                "' is not a TCP port (1..65535)");
    port = static_cast<int>(v);
  }
  EMBER_CHECK(!li.master_addr.empty() && port > 0, "rendezvous '", key, "' (rank ", li.rank, " of ", li.world_size,
              ", launcher ", li.launcher, "): no way to reach rank 0: ",
              li.master_addr.empty() ? "MASTER_ADDR is not set" : "MASTER_PORT is not set",
              "; set MASTER_ADDR and MASTER_PORT (rank 0's host and a free TCP port there) or "
              "EMBER_RENDEZVOUS_FILE=<a path on a file system every rank sees>");
  return tcp_broadcast_bytes(li.master_addr, port, li.rank, li.world_size, key, payload, timeout);
}

}  // namespace ember::parallel
